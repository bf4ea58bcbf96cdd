# The README's two commands are `make campaign` and `make test`; both bootstrap first.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.bootstrapped
APT_PKGS := openssh-server iptables iproute2 fuse3 libfuse3-dev procps psmisc openjdk-17-jre-headless chromium chromium-driver

.PHONY: bootstrap test test-slow campaign lint clean-hosts

bootstrap: $(STAMP)

$(STAMP): pyproject.toml
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: bootstrap
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q

test-slow: bootstrap
	$(VPY) -m pytest -q -m slow

lint: bootstrap
	$(VPY) -m ruff check .

campaign: bootstrap
	$(VENV)/bin/harness campaign campaigns/quick.toml

clean-hosts: bootstrap
	$(VENV)/bin/harness run --cleanup-only
