"""``python -m rara.worker --handlers mypkg.handlers …``: the same command as ``rara worker``."""

from rara.worker.main import main

if __name__ == "__main__":
    main()
