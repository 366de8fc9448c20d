# wanlab: the two commands of the README are `make demo` and `make test`;
# `make install` is their common first step. All are idempotent.

PYTHON ?= python3
APT_PACKAGES = iproute2 tcl iperf3 iperf iptables iputils-ping tcpdump procps util-linux frr traceroute \
	chromium chromium-driver mmdebstrap etcd-server etcd-client ethtool
# without their recommends: wireguard-tools recommends a kernel image (WireGuard runs here as
# wireguard-go, in user space; docs/edge.md); skopeo, umoci and zstd: OCI images
# (docs/oci-images.md); Open vSwitch (userspace datapath) for OpenFlow Mininet scripts
# (docs/mininet.md)
APT_BARE = nftables wireguard-tools wireguard-go skopeo umoci zstd openvswitch-switch \
	openvswitch-testcontroller
PY := $(shell command -v $(PYTHON))

.PHONY: install deps engine python web demo test lint test-engine test-python validate bench-swap bench-mininet bench-sim clean

install: deps engine python web

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing apt packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@missing=$$(for p in $(APT_BARE); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing apt packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $$missing; \
	fi

engine:
	cargo build --release --workspace

python:
	$(PY) -m pip install -q -e '.[plot,test,portal,cluster]'
	@printf '#!/bin/sh\nexec %s -m wanlab.cli "$$@"\n' "$(PY)" > /usr/local/bin/wanlab
	@chmod +x /usr/local/bin/wanlab
	@ln -sf $(CURDIR)/target/release/wanlab-engine /usr/local/bin/wanlab-engine
	@ln -sf $(CURDIR)/target/release/wanlab-gen /usr/local/bin/wanlab-gen

# the portal's pages: web/ (cytoscape.js, xterm.js from npm) bundled by esbuild into
# wanlab/portal/static; npm ci only when the lock file changed
web:
	@command -v npm >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	cd web && { [ node_modules/.package-lock.json -nt package-lock.json ] || \
		npm ci --no-audit --no-fund --loglevel=error; } && npm run --silent build

demo: install
	bash examples/demo.sh

test: install lint test-engine test-python

# the gates: Rust formatting and lints, Python lints, and the layers' import contract
lint:
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	$(PY) -m ruff check wanlab tests bench examples
	PYTHONPATH=$(CURDIR) $(PY) -c 'from importlinter.cli import lint_imports_command as c; c()' --no-cache

# the release-test profile (Cargo.toml): the release build's optimisation, without its
# link-time optimisation of every test binary
test-engine:
	cargo test --profile release-test --workspace

# pure tests first, then the clusters' tests beside the host's others (tests/run_parts.py);
# the slowest of each part are listed
test-python:
	$(PY) tests/run_parts.py

validate: install
	$(PY) bench/fidelity.py

bench-swap: install
	@dpkg -s mininet bridge-utils >/dev/null 2>&1 || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mininet bridge-utils
	$(PY) bench/swap.py

# Mininet scripts on wanlab against Debian's Mininet (extracted by the bench, never installed;
# its switches need Open vSwitch's userspace datapath)
bench-mininet: install
	@dpkg -s openvswitch-switch >/dev/null 2>&1 || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		openvswitch-switch
	$(PY) bench/mininet_vs.py

# simulation speed against ns-3 (the PyPI wheel, ~70 MB) and real-time scale
bench-sim: install
	@$(PY) -c 'import ns' 2>/dev/null || $(PY) -m pip install -q ns3
	$(PY) bench/sim_speed.py
	$(PY) bench/sim_scale.py

clean:
	cargo clean
