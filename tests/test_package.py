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


def test_the_readme_import_line_gives_the_functions_and_the_modules_keep_working():
    out = run_fresh("""
        from ddp_lib import spawn, launch, process_group
        import ddp_lib.launch as launch_module
        import ddp_lib.process_group as pg
        from ddp_lib.process_group import setup, teardown
        from ddp_lib.workers.spawning import hello

        assert pg is process_group and launch_module is launch and pg.setup is setup
        if __name__ == "__main__":
            print(spawn(hello, 2, show_output=False))
            print(launch(hello, 2, show_output=False).results)
            with process_group(0, 1) as device:
                import torch.distributed as dist
                print(dist.get_world_size(), device)
            print(launch_module.spawn is spawn)
    """)
    assert out.splitlines() == ["['hello from rank 0 of 2', 'hello from rank 1 of 2']"] * 2 + ["1 cpu", "True"]


def test_the_module_imported_first_still_gives_a_callable_process_group():
    out = run_fresh("""
        import ddp_lib.launch
        from ddp_lib import process_group
        with process_group(0, 1) as device:
            print(device)
    """)
    assert out == "cpu\n"
