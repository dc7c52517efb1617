/* The fault injector's hooks into the I/O layer, for the test build only: lib/io/fault.c is
 * compiled into the tests' archive (TEST_ONLY_SRC in the Makefile), never into libckpt.so or
 * libckpt.a, and its callers (io.c, engine.c) use these under CKPT_TEST_HOOKS. The tests' side of
 * the injector (arm, disarm, fired) is declared in io.h. */
#ifndef CKPT_IO_FAULT_H
#define CKPT_IO_FAULT_H

#include <stdbool.h>

#include "io/engine.h"
#include "io/io.h"

/* An engine of ckpt_io_ops that fails or shortens the armed operation, else does plain psync. */
extern const struct ckpt_io_ops ckpt_io_fault;

/* True while a fault is armed (ckpt_io_default() then returns ckpt_io_fault). */
bool ckpt_io_fault_armed(void);

/* For io_engine_submit(), so that every engine sees the same failures: counts r as one operation
 * of its kind. Returns 1 when the fault failed r (r->done has been called with -errno in r->res),
 * else 0, with r->first_max set when r's first transfer is to be short. */
int ckpt_io_fault_submit(struct io_req *r);

#endif
