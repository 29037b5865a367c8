"""The top-level names of ddp_lib, each checked in a fresh interpreter (import order matters)."""

import subprocess
import sys
import textwrap


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_ddp_lib_does_not_import_torch():
    assert run_fresh("import sys, ddp_lib; print('torch' in sys.modules)") == "False\n"


def test_the_readme_import_line_gives_run_ranks_and_the_package_names_only_modules():
    out = run_fresh("""
        import ddp_lib.process_group
        from ddp_lib import launch, process_group, run_ranks
        import ddp_lib.launch as launch_module
        from ddp_lib.workers.spawning import hello

        # A module is a module, whichever import came first: the functions live inside them.
        assert launch is launch_module and launch.run_ranks is run_ranks and process_group is ddp_lib.process_group
        if __name__ == "__main__":
            print(run_ranks(hello, 2, show_output=False))
            print(launch.launch(hello, 2, show_output=False).results)
            with process_group.process_group(0, 1) as device:
                import torch.distributed as dist
                print(dist.get_world_size(), device)
    """)
    assert out.splitlines() == ["['hello from rank 0 of 2', 'hello from rank 1 of 2']"] * 2 + ["1 cpu"]


def test_the_package_root_holds_only_what_a_user_imports_and_the_launcher_is_a_folder():
    from pathlib import Path

    import ddp_lib

    root = Path(ddp_lib.__file__).parent
    modules = sorted(p.stem for p in root.glob("*.py"))
    assert modules == ["__init__", "__main__", "_live_magic", "_live_rank", "cli", "device", "errors", "forkserver",
                       "lab_contents", "live", "mp", "ports", "process_group", "rank_files", "torchrun"]
    launcher = sorted(p.stem for p in (root / "launch").glob("*.py"))
    assert all(name.startswith("_") for name in launcher), launcher  # its internals are private
    assert run_fresh("""
        import sys
        from ddp_lib.launch import _record, _rank_side
        import ddp_lib.torchrun
        print('torch' in sys.modules)
    """) == "False\n"  # a rank under torchrun that never needs torch does not import it
