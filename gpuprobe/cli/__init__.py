"""The `gpuprobe` command. Each subcommand is a module in gpuprobe.cli.commands."""
