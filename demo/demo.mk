# The demo: `make demo` simulates a training run in host memory that checkpoints into
# ./demo-store (DEMO_STORE=DIR to change it; an old one is removed first), restores the latest
# checkpoint, checks it against the model and shows `ckptctl list`. DEMO_ARGS passes options to
# ckpt-demo (--size 1G, --steps 20, --every 5, --fraction 0.05).
DEMO_STORE ?= demo-store
DEMO_ARGS  ?=

$(B)/bin/ckpt-demo: demo/ckpt-demo.c include/ckpt.h $(B)/lib/libckpt.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(ALL_LDFLAGS) -L$(B)/lib -lckpt $(RPATH)

# The build runs in a sub-make, after deps: its flags come from pkg-config files deps installs.
demo: deps
	$(MAKE) all $(B)/bin/ckpt-demo
	rm -rf -- '$(DEMO_STORE)'
	$(B)/bin/ckpt-demo --store '$(DEMO_STORE)' $(DEMO_ARGS)

# tests/cli/t-demo.sh runs it.
tests: $(B)/bin/ckpt-demo
