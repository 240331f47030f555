# Two commands: `make demo` and `make test`. Both install what is missing first: `demo` only
# what the demo runs (scripts/bootstrap.sh demo: runtime, browser, teacher; wheels only),
# everything else the test set (scripts/bootstrap.sh test).
.PHONY: demo test bootstrap bootstrap-demo check unit shaders browser runtime bundle clean

PYTEST := .venv/bin/python -m pytest

demo: bootstrap-demo
	.venv/bin/python scripts/demo.py

test: bootstrap
	./scripts/check
	# One BLAS thread per process: the suite runs many small numpy models side by side, and on
	# busy cores OpenBLAS's spinning threads made them many times slower (measured 7x).
	# --durations: the slowest tests are named in every run, so the suite's time stays visible.
	OPENBLAS_NUM_THREADS=1 $(PYTEST) tests -q --durations=30

bootstrap:
	./scripts/bootstrap.sh test

bootstrap-demo:
	./scripts/bootstrap.sh demo

check: bootstrap
	./scripts/check

unit shaders browser runtime: bootstrap
	$(PYTEST) tests/$@ -q

bundle: bootstrap-demo
	.venv/bin/python build/build_web.py

clean:
	rm -rf dist build/.cache .pytest_cache .mypy_cache .ruff_cache
