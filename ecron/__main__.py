"""``python -m ecron``: the same as the ``ecron`` command."""

from ecron.cli import main

if __name__ == "__main__":
    main()
