"""The `busguard` subcommands' bodies; busguard.cli holds the parser that names them."""
