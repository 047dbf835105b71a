"""The real agent hosts (Claude Code, Codex, Gemini CLI) from npm, driven by their own CLIs."""
