"""The subcommands of ``harness``, one module each: ``run``, ``plan``, ``listing`` (``harness list``), ``init``,
``leaderboard``, ``compare``, ``ui`` and ``world``; ``common`` holds what they share. Each module has
``add_parser(sub)``, which :func:`harness.cli.build_parser` calls, and imports anything heavy only inside the
function that runs the command."""
