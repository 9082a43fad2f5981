# Entry points; each script sets up what it needs (scripts/setup.sh) first.
.PHONY: help run test bench

help:
	@echo "make run    build, serve model_repository/ with tritonserver, run the demo client"
	@echo "make test   build, Rust unit tests, end-to-end tests against tritonserver"
	@echo "make bench  perf_analyzer against the server vs. the in-process engine (out/bench.txt), then the gallery matching, ours vs faiss (out/bench-matching.txt)"

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh

bench:
	bash scripts/bench.sh
