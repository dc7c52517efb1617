/* I/O engines behind one ops table. The psync engine is always there; in the test build a
 * fault-injecting engine (io/fault.c) wraps it (fail the Nth write, read or sync with an errno, or
 * make it short). */
#ifndef CKPT_IO_H
#define CKPT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ckpt_io_ops {
	const char *name;
	ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
	ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
	int (*fdatasync)(int fd);
};

extern const struct ckpt_io_ops ckpt_io_psync;

/* Returns the engine the library uses: psync, or in the test build the fault engine while a fault
 * is armed. */
const struct ckpt_io_ops *ckpt_io_default(void);

/* Fault injection, for tests: defined only in the tests' archive (io/fault.c), not in libckpt.so
 * or libckpt.a. After `nth` more calls of op (counting from 1), that call fails with errno err, or
 * when err is 0 transfers only half. It applies to ckpt_io_default()'s engine and to the requests
 * of every asynchronous engine (engine.h). */
enum io_fault_op { IO_FAULT_WRITE, IO_FAULT_READ, IO_FAULT_SYNC };
void ckpt_io_fault_arm(enum io_fault_op op, unsigned long nth, int err);
void ckpt_io_fault_disarm(void);
/* Number of faults injected since the last arm. */
unsigned long ckpt_io_fault_fired(void);

/* Writes all n bytes at off, retrying short writes. Returns 0 or -CKPT_E_* naming path. */
int io_write_all(const struct ckpt_io_ops *io, int fd, const void *buf, size_t n, uint64_t off,
		 const char *path);
/* Reads n bytes at off. Returns 0, -CKPT_E_CORRUPT when the file ends first ("truncated"), or
 * -CKPT_E_IO, naming path. */
int io_read_all(const struct ckpt_io_ops *io, int fd, void *buf, size_t n, uint64_t off,
		const char *path);
/* Reads a whole small file into a malloc'd buffer (at most max bytes). Returns 0 or -CKPT_E_*. */
int io_slurp(const char *path, size_t max, uint8_t **out, size_t *len);
/* Writes a file atomically: a temporary file (io_create_tmp), fsync, rename, fsync of the directory. When renamed is not
 * NULL it is set to 1 once the file is in place (an error after that comes from the directory
 * fsync: the file is visible but may not survive a crash). */
int io_write_atomic(const char *dir, const char *name, const void *data, size_t len, int *renamed);
/* Creates a temporary file for dir/name exclusively (O_EXCL|O_NOFOLLOW, unpredictable name,
 * written to tmp). Returns the fd, or -CKPT_E_* (the message names the file). */
int io_create_tmp(const char *dir, const char *name, char *tmp, size_t tmplen);
/* fsyncs a directory. */
int io_fsync_dir(const char *dir);

/* As io_write_atomic(), but never replaces an existing file: returns 0 when this call created
 * dir/name, 1 when it existed already (left as it was), or a negative CKPT_E_* code. For files
 * several processes may create at once (the store header, a multi-rank checkpoint's part files
 * and global manifest). *linked (may be NULL) is set when dir/name is this call's file, also
 * when the directory's fsync then failed (the caller may take the file back). */
int io_write_new(const char *dir, const char *name, const void *data, size_t len, int *linked);

#endif
