/* The I/O fault injector, compiled only into the tests' archive (TEST_ONLY_SRC in the Makefile):
 * the armed fault's process-wide state, the fault engine of ckpt_io_ops (the Nth write, read or
 * sync fails with an errno, or transfers less), and the same fault applied to asynchronous engine
 * requests at submission. The release library has none of it: no state, no check on the I/O path. */
#include "io/fault.h"

#include <errno.h>
#include <unistd.h>

#include "common/common.h"

/* Fault state is process-wide: tests arm it, run one operation, and check the outcome. */
static struct {
	int armed;
	enum io_fault_op op;
	unsigned long nth, count, fired;
	int err;
} fault;

void ckpt_io_fault_arm(enum io_fault_op op, unsigned long nth, int err)
{
	__atomic_store_n(&fault.armed, 0, __ATOMIC_SEQ_CST);
	fault.op = op;
	fault.nth = nth;
	fault.count = 0;
	fault.fired = 0;
	fault.err = err;
	__atomic_store_n(&fault.armed, 1, __ATOMIC_SEQ_CST);
}

void ckpt_io_fault_disarm(void) { __atomic_store_n(&fault.armed, 0, __ATOMIC_SEQ_CST); }
unsigned long ckpt_io_fault_fired(void) { return __atomic_load_n(&fault.fired, __ATOMIC_SEQ_CST); }
bool ckpt_io_fault_armed(void) { return __atomic_load_n(&fault.armed, __ATOMIC_SEQ_CST); }

/* Returns -1 (fail with fault.err), 1 (go short), 0 (pass through). */
static int fault_hit(enum io_fault_op op)
{
	if (!__atomic_load_n(&fault.armed, __ATOMIC_SEQ_CST) || fault.op != op)
		return 0;
	if (__atomic_add_fetch(&fault.count, 1, __ATOMIC_SEQ_CST) != fault.nth)
		return 0;
	__atomic_add_fetch(&fault.fired, 1, __ATOMIC_SEQ_CST);
	return fault.err ? -1 : 1;
}

static ssize_t f_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int h = fault_hit(IO_FAULT_WRITE);
	if (h < 0) {
		errno = fault.err;
		return -1;
	}
	/* A short write must stay 4 KiB aligned for O_DIRECT files. */
	if (h > 0 && n > 4096)
		n = ALIGN_UP(n / 2, 4096) < n ? ALIGN_UP(n / 2, 4096) : 4096;
	return pwrite(fd, buf, n, off);
}

static ssize_t f_pread(int fd, void *buf, size_t n, off_t off)
{
	int h = fault_hit(IO_FAULT_READ);
	if (h < 0) {
		errno = fault.err;
		return -1;
	}
	if (h > 0 && n > 4096)
		n = 4096;
	return pread(fd, buf, n, off);
}

static int f_fdatasync(int fd)
{
	if (fault_hit(IO_FAULT_SYNC)) {
		errno = fault.err ? fault.err : EIO;
		return -1;
	}
	return fdatasync(fd);
}

const struct ckpt_io_ops ckpt_io_fault = {"fault", f_pwrite, f_pread, f_fdatasync};

int ckpt_io_fault_submit(struct io_req *r)
{
	enum io_fault_op fop = r->op == IO_WRITE ? IO_FAULT_WRITE
			       : r->op == IO_FSYNC ? IO_FAULT_SYNC : IO_FAULT_READ;
	int hit = fault_hit(fop);
	if (hit < 0) {
		r->res = -(fault.err ? fault.err : EIO);
		r->done(r);
		return 1;
	}
	if (hit > 0 && r->op != IO_FSYNC && r->len > 4096) {
		/* A short first transfer, as the kernel may do: the engine must finish the rest. */
		size_t half = ALIGN_UP(r->len / 2, 4096);
		r->first_max = half < r->len ? half : 4096;
	}
	return 0;
}
