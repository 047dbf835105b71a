"""What the tests share: daemons, clients, repositories, texts and fixtures' helpers.

Test modules import from here (``from tests.support.daemon import DaemonProcess``), never from
one another; pytest fixtures stay in the conftest.py files.
"""
