"""``python -m rara.worker --handlers mypkg.handlers …``: the same command as ``rara worker``."""

from rara.cli.worker import main

if __name__ == "__main__":
    main()
