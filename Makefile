# The README's two commands are `make campaign` and `make test`; both bootstrap first.
# The CPython the venv is made from: the distribution's own /usr/bin/python3 when it is 3.11 or
# later (Debian builds it with profile-guided optimisation and LTO), else the python3 on the
# PATH. A pyenv build without --enable-optimizations, which some machines put first on the
# PATH, runs the simulator at about 0.75x (docs/simulation.md, "The interpreter").
# `make PY=...` takes another; an existing .venv keeps its own (remove it to switch).
ifeq ($(origin PY),undefined)
PY := $(shell /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
        && echo /usr/bin/python3 || echo python3)
endif
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.bootstrapped
APT_PKGS := python3-venv openssh-server iptables iproute2 fuse3 libfuse3-dev procps psmisc openjdk-17-jre-headless maven chromium chromium-driver
# Toxiproxy (docs/toxiproxy.md), built from its Go module at this tag into .venv/bin, where the
# harness looks first; control/toxiproxy.py says the same version.
TOXIPROXY_VERSION := 2.12.0
TOXIPROXY_STAMP := $(VENV)/.toxiproxy-v$(TOXIPROXY_VERSION)
# go on the PATH, else the usual install place (a non-login shell may not have it on the PATH)
GO ?= $(firstword $(shell command -v go 2>/dev/null) $(wildcard /usr/local/go/bin/go))
# The checkers' native history reader (checkers/native_ingest.py), built from native/histingest
# with the locked crate versions into .venv/bin, where the checkers look first.
HISTINGEST := $(VENV)/bin/histingest
HISTINGEST_SRC := native/histingest/Cargo.toml native/histingest/Cargo.lock $(wildcard native/histingest/src/*.rs) \
  $(wildcard native/histingest/src/bin/*/*.rs)
CARGO ?= $(firstword $(shell command -v cargo 2>/dev/null) $(wildcard $(HOME)/.cargo/bin/cargo))

.PHONY: bootstrap spark-archive test test-slow campaign lint clean-hosts vms vms-down test-vms

# PyPy 3.11 for simulated searches (harness/pypy.py): Debian trixie's packages, verified against
# the signed suite and unpacked into the venv, with a launcher in .venv/bin.
PYPY := $(VENV)/bin/pypy-sim

# Apache Kafka as a second system under test (docs/kafka.md): the pinned broker versions'
# classpaths, resolved by Maven from systems/kafka/pom.xml into .venv/kafka/<version>/libs.
KAFKA_STAMP := $(VENV)/kafka/.versions

bootstrap: $(STAMP) venv-interpreter $(TOXIPROXY_STAMP) $(HISTINGEST) $(PYPY) $(KAFKA_STAMP) spark-archive

# A venv keeps the interpreter it was made from: when that is not the one PY names now (a venv
# made before the Makefile chose the distribution's), say so, and how to switch.
.PHONY: venv-interpreter
venv-interpreter: $(STAMP)
	@made=$$($(VPY) -c 'import os, sys; print(os.path.realpath(sys._base_executable))'); \
	want=$$($(PY) -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null); \
	if [ -n "$$made" ] && [ -n "$$want" ] && [ "$$made" != "$$want" ]; then \
	  echo "make bootstrap: $(VENV) runs on $$made, not on $$want, which the Makefile picks (a CPython built with PGO: docs/simulation.md, \"The interpreter\"); remove $(VENV) and run make again to switch" >&2; \
	fi

$(STAMP): pyproject.toml
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[dev,baseline]'
	touch $(STAMP)

# -trimpath and a fixed -ldflags: the same tag gives the same binary on every machine with
# the same Go. Go >= 1.23 is needed (Toxiproxy's go.mod); GOTOOLCHAIN=auto fetches it from
# the module proxy when the installed go is older.
# Without Go it is skipped, said once, and no stamp is left: a later bootstrap with Go builds it.
$(TOXIPROXY_STAMP): $(STAMP)
	@if [ -z "$(GO)" ]; then \
	  echo "make bootstrap: no Go (>= 1.21): Toxiproxy is skipped. Runs work, but a toxic fault (bandwidth, latency, stall, slicer, limit-data, slow-close, reset-peer) is refused until toxiproxy-server v$(TOXIPROXY_VERSION) is in $(VENV)/bin: install Go and run make bootstrap again, or put its release binary there (docs/toxiproxy.md)" | tee $(VENV)/.skipped-toxiproxy >&2; \
	  exit 0; \
	fi; \
	rm -f $(VENV)/.skipped-toxiproxy; \
	$(MAKE) --no-print-directory toxiproxy-build

.PHONY: toxiproxy-build
toxiproxy-build:
	rm -rf $(VENV)/.toxiproxy-build
	GOBIN=$(abspath $(VENV))/.toxiproxy-build GOTOOLCHAIN=auto GOFLAGS=-trimpath $(GO) install \
	  -ldflags="-s -w -X github.com/Shopify/toxiproxy/v2.Version=$(TOXIPROXY_VERSION)" \
	  github.com/Shopify/toxiproxy/v2/cmd/server@v$(TOXIPROXY_VERSION)
	mv $(VENV)/.toxiproxy-build/server $(VENV)/bin/toxiproxy-server
	rm -rf $(VENV)/.toxiproxy-build
	touch $(TOXIPROXY_STAMP)

# The checkers' two native programs, histingest (history -> tables) and histcheck (tables ->
# anomalies). About 2 minutes from nothing on 2 cores (arrow and parquet); the target folder
# is kept in the venv, so a change to the sources rebuilds only this crate.
# Without cargo they are skipped, said once: the checkers read histories in Python and check on
# Spark's SQL plans instead (docs/checkers.md, "Without the native programs"). What was skipped
# is written to .venv/.skipped-<part>: `make test` then skips the tests of that part, saying why
# (tests/support/tools.py), where without the note a missing program fails them.
$(HISTINGEST): $(STAMP) $(HISTINGEST_SRC)
	@if [ -z "$(CARGO)" ]; then \
	  echo "make bootstrap: no Rust cargo (>= 1.85): the checkers' native programs (histingest, histcheck) are skipped. The checkers read histories in Python and check them on Spark's SQL plans instead: the same verdicts, slower (ingest about 12x at 1M operations, docs/checkers.md); install Rust from https://rustup.rs and run make bootstrap again to build them" | tee $(VENV)/.skipped-native >&2; \
	  exit 0; \
	fi; \
	rm -f $(VENV)/.skipped-native; \
	$(MAKE) --no-print-directory histingest-build

.PHONY: histingest-build
histingest-build:
	$(CARGO) build --release --locked --quiet --manifest-path native/histingest/Cargo.toml \
	  --target-dir $(abspath $(VENV))/.histingest-target
	install -m 0755 $(VENV)/.histingest-target/release/histcheck $(VENV)/bin/histcheck
	install -m 0755 $(VENV)/.histingest-target/release/histingest $(HISTINGEST)

# The Spark driver JVM's class archive (checkers/spark_archive.py): a new session starts in
# about half the time with it. Named by the JVM and pyspark's jars, so it is checked on every
# bootstrap (at once when this JVM's is there) and dumped anew after either changes: about
# 90 s on 2 cores. Without it Spark starts as it did; a failure is said and noted for the tests
# (tests/checkers/test_spark_archive.py), as the skipped parts above are.
spark-archive: $(STAMP) $(HISTINGEST)
	@if $(VPY) -m checkers.spark_archive --if-missing; then rm -f $(VENV)/.skipped-spark-archive; \
	else echo "make bootstrap: the Spark driver's class archive was not dumped (the error is above): Spark sessions start without it, slower, with the same checks; run make bootstrap again to retry" | tee $(VENV)/.skipped-spark-archive >&2; fi

$(PYPY): $(STAMP) harness/pypy.py
	$(VPY) -m harness.pypy install

$(KAFKA_STAMP): $(STAMP) systems/kafka/pom.xml control/kafka_install.py
	$(VPY) -m control.kafka_install
	touch $@

# The project's packages, compiled ahead of the tests and campaigns. Where PYTHONDONTWRITEBYTECODE
# is set (as on the development machines here) Python writes no bytecode, so every process a test
# starts (the harness command, host nodes, Spark's Python workers) compiled the sources anew:
# 0.6 s of each `harness` command's 2.8 s start. Bytecode is still read where that is set, and
# a source newer than its bytecode is compiled as before.
# The packages of pyproject.toml's [tool.setuptools.packages.find].
PACKAGES := replication control harness nemesis workloads checkers simulation runformat

.PHONY: bytecode
bytecode: $(STAMP)
	$(VPY) -m compileall -q $(PACKAGES)

test: bootstrap bytecode
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q

test-slow: bootstrap bytecode
	$(VPY) -m pytest -q -m slow

lint: bootstrap
	$(VPY) -m ruff check .

campaign: bootstrap bytecode
	$(VENV)/bin/harness campaign campaigns/quick.toml

clean-hosts: bootstrap
	$(VENV)/bin/harness run --cleanup-only

# VM hosts (docs/vms.md): a Debian box built here, libvirt, vagrant; KVM when a guest boots
# under it, else TCG. `make vms VMS=3 ACCEL=tcg MEMORY=1536` to choose; `make vms-down` removes them.
VM_APT_PKGS := vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils debootstrap dnsmasq-base fdisk rsync openssh-client chrony
VMS   ?= 4
ACCEL ?= auto
MEMORY ?= 1536

vms: bootstrap
	@missing=""; for p in $(VM_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(VPY) vagrant/vms.py up --vms $(VMS) --accel $(ACCEL) --memory $(MEMORY)

vms-down:
	$(PY) vagrant/vms.py down

# Needs `make vms` first: the tests run on the VMs of vagrant/inventory.toml (and skip, saying
# so, without them).
test-vms: bootstrap
	$(VPY) -m pytest -q -m vms tests/vms
