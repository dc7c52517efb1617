# nvmetune: provisions NVMe storage for checkpoints. Included by the top-level Makefile.
# Its objects have their own rule (the more specific pattern wins) because they do not use
# include/ckpt.h; they link libnvme, libblkid and liburing directly (libnvme's .pc file would pull
# in json-c and openssl .pc files that a build machine need not have).
NVMETUNE_SRC  := $(sort $(wildcard cli/nvmetune/*.c))
NVMETUNE_OBJ  := $(NVMETUNE_SRC:%.c=$(B)/obj/%.o)
NVMETUNE_LIBS := -lnvme -lblkid -luring
# Only checked to exist (a clear error instead of a failed link); their flags are not used.
PKG_REQUIRE += libnvme blkid
pkgdev_libnvme := libnvme-dev
pkgdev_blkid := libblkid-dev
BINS += $(B)/bin/nvmetune

$(B)/obj/cli/nvmetune/%.o: cli/nvmetune/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) -Icli/common -c $< -o $@

$(B)/bin/nvmetune: $(NVMETUNE_OBJ) $(CLI_COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(NVMETUNE_OBJ) $(CLI_COMMON_OBJ) $(NVMETUNE_LIBS)

.PHONY: nvmetune
nvmetune: $(B)/bin/nvmetune

# Unit tests of the pure parts (state file, profiles, sorting, quoting): the tool's objects
# without main.o, run by tests/run.sh as build/tests/bin/t-nvmetune-unit.
NVMETUNE_LIB_OBJ := $(filter-out $(B)/obj/cli/nvmetune/main.o,$(NVMETUNE_OBJ))
$(B)/tests/bin/t-nvmetune-unit: tests/nvmetune/t-nvmetune-unit.c $(NVMETUNE_LIB_OBJ) $(CLI_COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Icli/common -Icli/nvmetune $< $(NVMETUNE_LIB_OBJ) $(CLI_COMMON_OBJ) \
	  -o $@ $(ALL_LDFLAGS) $(NVMETUNE_LIBS)
TEST_EXTRA += $(B)/tests/bin/t-nvmetune-unit
