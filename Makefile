# Entry points; each script sets up what it needs (scripts/setup.sh) first.
.PHONY: help run app test bench model-check

help:
	@echo "make run    build, serve model_repository/ with tritonserver, run the demo client"
	@echo "make app    build, then the browser app on http://localhost:8501 (starts a server if none runs)"
	@echo "make test   build, Rust unit tests, end-to-end tests against tritonserver"
	@echo "make model-check DETECTOR=det.onnx EMBEDDER=emb.onnx [PHOTOS=dir]  how the backend reads your models, and a match_threshold for your photos"
	@echo "make bench  perf_analyzer against the server vs. the in-process engine (out/bench.txt), then the gallery matching, ours vs faiss (out/bench-matching.txt)"

run:
	bash scripts/run.sh

app:
	bash scripts/app.sh

test:
	bash scripts/test.sh

bench:
	bash scripts/bench.sh

# scripts/model_check.py after set-up and the build; PHOTOS: a folder per person, or name_*.jpg.
model-check:
	@test -n "$(DETECTOR)" -a -n "$(EMBEDDER)" || { echo "usage: make model-check DETECTOR=det.onnx EMBEDDER=emb.onnx [PHOTOS=dir]"; exit 2; }
	bash scripts/setup.sh
	. assets/env.sh && bash scripts/build.sh && "$$PYTHON" scripts/model_check.py "$(DETECTOR)" "$(EMBEDDER)" $(if $(PHOTOS),--photos "$(PHOTOS)")
