"""Context hooks and the packing of a context block."""
