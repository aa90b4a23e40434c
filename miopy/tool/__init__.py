"""The ``miopy`` command-line tool: ``info``, ``cache``, ``db``, ``kernels`` and ``tune``.

One module per subcommand; ``cli`` parses the command line and turns every error into one line."""
