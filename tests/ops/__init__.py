"""Operations: lifecycle, systemd, autostart, approval, recallctl commands, export and import."""
