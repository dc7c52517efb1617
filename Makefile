# libckpt — top-level build. `make` builds the library and CLIs into build/;
# `make check` installs missing packages, builds and runs every test; `make demo` runs the demo.
VERSION_MAJOR := 0
VERSION_MINOR := 1
VERSION_PATCH := 0
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
DESTDIR ?=

CC      ?= gcc
B       := build
PKGS    := liburing libzstd libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT      ?= -O2
SANITIZE ?=
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS := -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $(WARN) $(CFLAGS) $(SANITIZE) \
              -Iinclude -DCKPT_VERSION_STRING='"$(VERSION)"' $(PKG_CFLAGS)
LIB_CFLAGS := $(ALL_CFLAGS) -fPIC -fvisibility=hidden -DCKPT_BUILDING_LIB
LDLIBS  := $(PKG_LIBS) -lpthread -ldl
LDFLAGS ?=
ALL_LDFLAGS := $(LDFLAGS) $(SANITIZE)

LIB_SRC := $(sort $(wildcard lib/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
SONAME  := libckpt.so.$(VERSION_MAJOR)
SOLIB   := $(B)/lib/libckpt.so.$(VERSION)
ALIB    := $(B)/lib/libckpt.a

CLI_COMMON_SRC := $(sort $(wildcard cli/common/*.c))
CLI_COMMON_OBJ := $(CLI_COMMON_SRC:%.c=$(B)/obj/%.o)
CKPTCTL_SRC := $(sort $(wildcard cli/ckptctl/*.c))
CKPTCTL_OBJ := $(CKPTCTL_SRC:%.c=$(B)/obj/%.o)
RPATH   := -Wl,-rpath,'$$ORIGIN/../lib'

BINS := $(B)/bin/ckptctl
# The included fragments define rules of their own: `make` alone must still mean `make all`.
.DEFAULT_GOAL := all
# Other parts of the tree (nvmetune, tests, bench, demo) bring their own rules and may add to BINS.
-include lib/cuda/cuda.mk
-include cli/nvmetune/nvmetune.mk
-include tests/tests.mk
-include bench/bench.mk
-include demo/demo.mk
.PHONY: all lib check demo bench install uninstall clean deps test-deps sanitize tsan
all: lib $(BINS) $(B)/lib/libckpt.pc

lib: $(SOLIB) $(B)/lib/libckpt.so $(B)/lib/$(SONAME) $(ALIB)

$(B)/obj/lib/%.o: lib/%.c $(wildcard lib/*.h) include/ckpt.h
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(B)/obj/cli/%.o: cli/%.c $(wildcard cli/*/*.h) include/ckpt.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Icli/common -c $< -o $@

$(SOLIB): $(LIB_OBJ) lib/libckpt.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/libckpt.map -Wl,-z,defs \
	  $(ALL_LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)
$(B)/lib/$(SONAME): $(SOLIB)
	ln -sf $(notdir $(SOLIB)) $@
$(B)/lib/libckpt.so: $(B)/lib/$(SONAME)
	ln -sf $(SONAME) $@
$(ALIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/lib/libckpt.pc: libckpt.pc.in Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' $< > $@

$(B)/bin/ckptctl: $(CKPTCTL_OBJ) $(CLI_COMMON_OBJ) $(B)/lib/libckpt.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(CKPTCTL_OBJ) $(CLI_COMMON_OBJ) -L$(B)/lib -lckpt $(RPATH)


deps:
	@sh tools/install-deps.sh build
test-deps:
	@sh tools/install-deps.sh test

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) \
	  $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man1
	install -m 644 include/ckpt.h $(DESTDIR)$(INCDIR)/ckpt.h
	install -m 755 $(SOLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SOLIB)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libckpt.so
	install -m 644 $(ALIB) $(DESTDIR)$(LIBDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' libckpt.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libckpt.pc
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	for m in docs/*.1; do [ -f "$$m" ] && install -m 644 "$$m" $(DESTDIR)$(MANDIR)/man1/; done; true
	for c in tools/completion/*; do [ -f "$$c" ] && install -D -m 644 "$$c" \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$(basename "$$c"); done; true
	PREFIX="$(PREFIX)" LIBDIR="$(LIBDIR)" DESTDIR="$(DESTDIR)" PYTHONDIR="$(PYTHONDIR)" sh python/install.sh

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/ckpt.h $(DESTDIR)$(LIBDIR)/libckpt.* \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/libckpt.pc
	for b in $(notdir $(BINS)); do rm -f $(DESTDIR)$(BINDIR)/$$b $(DESTDIR)$(MANDIR)/man1/$$b.1; done
	for d in $(DESTDIR)$(PREFIX)/lib/python3*/dist-packages/libckpt; do rm -rf "$$d"; done

clean:
	rm -rf $(B) demo-store
