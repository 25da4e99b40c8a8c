"""Subcommands, found by name. A module here defines NAME, HELP, add_arguments(parser) and
run(args) -> exit code, and imports heavy dependencies inside run() so that `gpuprobe --help`
stays fast and light."""
