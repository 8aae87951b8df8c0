"""`python -m cli`: the attnserve command."""

from .main import main

main()
