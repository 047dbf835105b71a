"""What capture runs on a text before it is stored: redaction, trust scoring, their prefilters."""
