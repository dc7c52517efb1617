# Benchmarks. Included by the top-level Makefile before its `all:` rule: .DEFAULT_GOAL is saved
# here and put back at the end, so that no target of this file ever becomes the default goal.
#
#   make bench         fio limits + ckpt-bench (memcpy, full/incremental save, restore, snapshot)
#                      -> build/bench/results.json and a PASS/MISS table, then import_bench.sh
#                      (ckptctl import and export of a 2 GiB safetensors file) into the same
#                      file, dist_bench.sh, the Python figures, then bench/summary.py's table
#   make bench-import  only import_bench.sh
#   make bench-plot    only bench/plot.py: results.json drawn as build/bench/results.svg
#                      (throughput against fio, cp and torch.save; a save's blocked, snapshot and
#                      persist time); `make bench` and `make bench-quick` end with it
#   make bench-quick   BENCH_SIZE=256M BENCH_RUNS=1 BENCH_IMPORT_SIZE=128M (development)
#   make bench-dcp     only bench/python/dcp_bench.py (libckpt against DCP's
#                      FileSystemWriter and torch.save, 1, 2, 4 gloo ranks; the torch 2.x venv)
#   make bench-s3      only remote_bench.sh (a 2 GiB checkpoint pushed to radosgw and
#                      pulled back against aws s3 cp; the 5%-changed push); `make bench` runs it
#   make bench-peers   only bench/python/peers_bench.py: libckpt against DeepSpeed's FastPersist,
#                      torch.save, DCP (its DefaultStager, thread and process) and
#                      s3torchconnector, on the same state; installs the peers first
#                      (tools/peers-venv.sh), draws build/bench/peers.svg, ends with the goal
#                      lines (PASS, MISS or NOT RUN); `make bench` runs it
#   make bench-dist    only dist_bench.sh (mpirun -np 4 saves against fio --numjobs=4,
#                      replicated snapshot per rank against one rank alone; 1, 2, 4 ranks
#                      against fio --numjobs=N, async blocked time, bench/dist-commit's commit of
#                      4 to 256 thread-ranks); `make bench` runs it last
#
# Environment: BENCH_DIR (directory to test, default build/bench/work), BENCH_SIZE (state size,
# default 2G), BENCH_RUNS (default 3), BENCH_IMPORT_SIZE (default 2G in `make bench`, 1G for import_bench.sh alone), more in bench/README.md.
BENCH_SAVED_GOAL := $(.DEFAULT_GOAL)
BENCH_SRC  := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRC:bench/%.c=$(B)/bench/%)

$(B)/bench/%: bench/%.c include/ckpt.h $(B)/lib/libckpt.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(ALL_LDFLAGS) -L$(B)/lib -lckpt $(RPATH)

# pipe-sweep needs the discard I/O engine of the test builds: it links the tests' archive.
$(B)/bench/pipe-sweep: bench/pipe-sweep.c include/ckpt.h $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib $< -o $@ $(ALL_LDFLAGS) $(TLIB) $(LDLIBS)

# s3-bench drives the S3 backend (internal to the library): the tests' archive too.
$(B)/bench/s3-bench: bench/s3-bench.c lib/remote/remote.h $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilib $< -o $@ $(ALL_LDFLAGS) $(TLIB) $(LDLIBS)

.PHONY: bench bench-bins bench-import bench-quick bench-dist bench-plot
bench-bins: lib $(BENCH_BINS)

# The import part needs ckptctl (built by `all`); it skips itself while `ckptctl import` is absent.
bench: test-deps
	$(MAKE) all bench-bins
	B='$(B)' sh bench/run-bench.sh
	@# The export figure is on a 2 GiB file (BENCH_IMPORT_SIZE to change it).
	B='$(B)' BENCH_IMPORT_SIZE=$${BENCH_IMPORT_SIZE:-2G} sh bench/import_bench.sh
	B='$(B)' sh bench/dist_bench.sh
	@# The Python figures (torch_save/load against the binding), merged into results.json; Debian's
	@# python3-torch is in /usr/bin/python3, which a PATH's other python3 may not have.
	if /usr/bin/python3 -c 'import torch' 2>/dev/null; then \
		B='$(B)' BENCH_CUDA=0 /usr/bin/python3 bench/python/torch_vs_ckpt.py; \
	else echo "bench: /usr/bin/python3 has no torch (python3-torch): Python figures skipped"; fi
	$(bench_dcp_run)
	$(bench_peers_run)
	B='$(B)' bash bench/remote_bench.sh
	B='$(B)' python3 bench/summary.py
	@$(MAKE) --no-print-directory bench-plot

# The picture of results.json (bench/plot.py): build/bench/results.svg. matplotlib is Debian's
# python3-matplotlib, for /usr/bin/python3 (tools/deps.d/bench.test).
bench-plot:
	B='$(B)' /usr/bin/python3 bench/plot.py

bench-dist: test-deps
	$(MAKE) lib bench-bins
	B='$(B)' sh bench/dist_bench.sh

bench-quick: test-deps
	$(MAKE) all bench-bins
	B='$(B)' BENCH_SIZE=$${BENCH_SIZE:-256M} BENCH_RUNS=$${BENCH_RUNS:-1} sh bench/run-bench.sh
	B='$(B)' BENCH_IMPORT_SIZE=$${BENCH_IMPORT_SIZE:-128M} BENCH_RUNS=$${BENCH_RUNS:-1} \
	  sh bench/import_bench.sh
	@$(MAKE) --no-print-directory bench-plot

bench-import: test-deps
	$(MAKE) all
	B='$(B)' sh bench/import_bench.sh

# libckpt against PyTorch DCP: bench/python/dcp_bench.py on the torch 2.x virtual
# environment (tools/venv.sh; $LIBCKPT_TORCH_VENV moves it), against $(B)'s library; skipped, with
# a line saying how to make it, without the venv. BENCH_DCP_SIZE (default 1G), BENCH_RUNS,
# BENCH_DCP_WORLDS (default "1 2 4"): bench/README.md.
BENCH_TORCH2_VENV := $(or $(LIBCKPT_TORCH_VENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/libckpt/torch2-venv)
define bench_dcp_run
	if [ -x '$(BENCH_TORCH2_VENV)/bin/python' ]; then \
		B='$(B)' CKPT_LIBRARY='$(abspath $(B))/lib/libckpt.so.0' '$(BENCH_TORCH2_VENV)/bin/python' \
		  bench/python/dcp_bench.py; \
	else echo "bench: no torch 2.x virtual environment at $(BENCH_TORCH2_VENV): DCP figures skipped (make it: sh tools/venv.sh tools/deps.d/torch2.test.venv)"; fi
endef

.PHONY: bench-dcp
bench-dcp: test-deps
	$(MAKE) lib
	$(bench_dcp_run)
# bench/remote_bench.sh alone (a checkpoint pushed to a radosgw on loopback and
# pulled back, against aws s3 cp; the 5%-changed push), merged into results.json, then the table.
# It skips, saying why, without radosgw (tools/deps.d/s3.test) or awscli.
.PHONY: bench-s3
bench-s3: test-deps
	$(MAKE) all bench-bins
	B='$(B)' bash bench/remote_bench.sh
	B='$(B)' python3 bench/summary.py

# libckpt against its peers (bench/python/peers_bench.py; bench/README.md): the peers (DeepSpeed,
# s3torchconnector) are installed here only, never by `make check`: tools/peers-venv.sh makes
# their environment on the torch 2.x one, saying what it installs with pip's progress. Where it
# cannot, the bench runs on the torch 2.x environment and their rows say "not run" with the
# error. The picture: build/bench/peers.svg (bench/plot_peers.py, Debian's matplotlib). Ends with
# the goal lines. BENCH_PEERS_SIZES (default "1G 4G"), BENCH_RUNS, BENCH_PEERS_WORLDS,
# BENCH_PEERS_S3_SIZE (default 2G), more in bench/README.md.
BENCH_PEERS_VENV := $(or $(LIBCKPT_PEERS_VENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/libckpt/peers-venv)
define bench_peers_run
	sh tools/peers-venv.sh || echo "bench: the peers' environment could not be made (above): their rows say 'not run'"
	py='$(BENCH_PEERS_VENV)/bin/python'; [ -x "$$py" ] || py='$(BENCH_TORCH2_VENV)/bin/python'; \
	if [ -x "$$py" ]; then \
		B='$(B)' CKPT_LIBRARY='$(abspath $(B))/lib/libckpt.so.0' "$$py" bench/python/peers_bench.py; \
	else echo "bench: no torch 2.x virtual environment at $(BENCH_TORCH2_VENV): peers figures skipped"; fi
	B='$(B)' /usr/bin/python3 bench/plot_peers.py || echo "bench: no picture of the peers (above)"
	@echo "libckpt against its peers, the goals (bench/README.md):"
	@B='$(B)' python3 bench/summary.py --goals
endef

.PHONY: bench-peers
bench-peers: test-deps
	$(MAKE) all $(B)/tests/bin/s3ops
	$(bench_peers_run)

# The peers' comparison on CUDA tensors (bench/gpu/peers-run.sh, installed as peers.sh beside
# run.sh, with the Python benches it runs) is part of the GPU bundle; on the lent machine:
# gpu-bundle/peers.sh OUTDIR (about 4 minutes, apart from run.sh's 8). This name stays for those
# who learned it.
.PHONY: gpu-bundle-peers
gpu-bundle-peers: gpu-bundle
	@echo "$(B)/gpu-bundle: peers.sh OUTDIR runs libckpt against its peers on CUDA tensors"

.DEFAULT_GOAL := $(BENCH_SAVED_GOAL)
