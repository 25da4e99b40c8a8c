"""Run by tests/test_plan_vllm_parser.py in vLLM's own venv (.vllm-venv): parse plan command
lines with vLLM's engine-args parser. stdin: JSON [{"name", "argv", "env"}] where argv is what
follows the program (`vllm serve`: the model, then flags). stdout: JSON [{"name", "error"}],
error None where vLLM took the line: its parser, EngineArgs.from_cli_args, and every VLLM_*
environment variable one vLLM knows."""
import contextlib
import io
import json
import sys


def check(item: dict) -> str | None:
    import vllm.envs as envs
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model, *flags = item["argv"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(
                ["--model", model, *flags])
    except SystemExit:
        said = err.getvalue().strip()
        start = said.find("error:")  # argparse's usage text comes first
        return " ".join(said[start if start >= 0 else 0:].split())[:600] or "refused"
    try:
        AsyncEngineArgs.from_cli_args(ns)
    except Exception as exc:  # what vLLM raises for a bad combination
        return f"{type(exc).__name__}: {exc}"
    unknown = [k for k, _ in item.get("env", []) if k.startswith("VLLM_")
               and k not in envs.environment_variables]
    return f"unknown environment variable {unknown[0]}" if unknown else None


def known_flags() -> set[str]:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return set(make_arg_parser(FlexibleArgumentParser())._option_string_actions)


def main() -> int:
    """stdin may also be {"lines": [...], "flags": [...]}: flags named elsewhere (the docs a
    plan cites) come back in "unknown_flags" when vLLM's parser has no such option."""
    import vllm

    data = json.load(sys.stdin)
    items, flags = (data, []) if isinstance(data, list) else (data["lines"], data.get("flags", []))
    json.dump({"version": vllm.__version__,
               "results": [{"name": i["name"], "error": check(i)} for i in items],
               "unknown_flags": sorted(set(flags) - known_flags())}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
