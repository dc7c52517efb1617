/* Buffered I/O fallback of the save pipeline:
 * - a store on a file system that refuses O_DIRECT at open (ramfs; tmpfs refuses it too before
 *   Linux 6.6): the save succeeds with stats.direct_io 0, restore and verify work;
 * - a store on tmpfs: direct_io reports what the file system does (probed here);
 * - O_DIRECT refused at the first write (EINVAL from the fault engine on the pack header): the
 *   pack goes on buffered, the save succeeds with direct_io 0;
 * - CKPT_OPT_DIRECT_IO 0 on a normal directory: direct_io 0; the default there: 1 when the file
 *   system takes O_DIRECT.
 * Mounting needs root; without it, /dev/shm (tmpfs) stands in and ramfs is skipped. */
#include "t-pipe-util.h"

#include <fcntl.h>
#include <sys/mount.h>

#include "io/io.h"

#define CS (64u << 10)

/* 1 if a file in dir can be opened and written with O_DIRECT. */
static int direct_works(const char *dir)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/.direct-probe", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	int ok = 0;
	if (fd >= 0) {
		void *b = NULL;
		if (!posix_memalign(&b, 4096, 4096)) {
			memset(b, 0, 4096);
			ok = pwrite(fd, b, 4096, 0) == 4096;
			free(b);
		}
		close(fd);
	}
	unlink(p);
	return ok;
}

/* Saves two checkpoints (the second incremental) into a store at dir and checks them; returns
 * the direct_io the saves report (they must agree). */
static int save_and_check(const char *dir, int direct_opt /* as tp_opts.direct_io */, int engine)
{
	struct tp_opts o = TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2,
				   .direct_io = direct_opt, .engine = engine);
	ckpt_store *s = tp_open(dir, &o);
	struct tp_set *a = tp_set_new(6, 500001, 11);
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 2, 1);
	ckpt_stats st1, st2;
	CHECK_OK(tp_save(s, 1, a, &st1));
	save1 *sv = tp_begin(s, 2, b);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait(sv, &st2));
	CHECK(st1.direct_io == st2.direct_io);
	CHECK(st2.chunks_reused > 0);
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	ckpt_store_close(s);
	/* And from a fresh handle with the default options. */
	s = tp_open(dir, &TP_OPTS(.no_create = 1));
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	return st1.direct_io;
}

static char *mount_fs(const char *type)
{
	char *mnt = strdup("/tmp/ckpt-fallback-XXXXXX");
	if (!mkdtemp(mnt)) {
		free(mnt);
		return NULL;
	}
	if (mount(type, mnt, type, 0, !strcmp(type, "tmpfs") ? "size=256m" : NULL)) {
		printf("mount -t %s: %s\n", type, strerror(errno));
		rmdir(mnt);
		free(mnt);
		return NULL;
	}
	return mnt;
}

static void unmount_fs(char *mnt)
{
	t_rmrf(mnt); /* empties it (the mount point itself stays busy) */
	if (umount2(mnt, MNT_DETACH))
		printf("umount %s: %s\n", mnt, strerror(errno));
	rmdir(mnt);
	free(mnt);
}

static void on_fs(const char *type)
{
	char *mnt = mount_fs(type);
	char *shm = NULL;
	if (!mnt && !strcmp(type, "tmpfs")) {
		shm = strdup("/dev/shm/ckpt-fallback-XXXXXX");
		if (!mkdtemp(shm)) {
			printf("no tmpfs available: skipped\n");
			free(shm);
			return;
		}
	}
	if (!mnt && !shm) {
		printf("%s: cannot mount, skipped\n", type);
		return;
	}
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/store", mnt ? mnt : shm);
	int expect = direct_works(mnt ? mnt : shm);
	printf("%s%s: O_DIRECT %s\n", type, shm ? " (/dev/shm)" : "", expect ? "accepted" : "refused");
	if (!strcmp(type, "ramfs"))
		CHECK(expect == 0); /* ramfs has no direct I/O */
	int got = save_and_check(dir, 0, CKPT_ENGINE_AUTO);
	CHECK(got == expect);
	/* The psync engine as well (buffered writes from the pool). */
	char dir2[4300];
	snprintf(dir2, sizeof dir2, "%s/store-psync", mnt ? mnt : shm);
	got = save_and_check(dir2, 0, CKPT_ENGINE_PSYNC);
	CHECK(got == expect);
	if (mnt)
		unmount_fs(mnt);
	if (shm) {
		t_rmrf(shm);
		free(shm);
	}
}

/* O_DIRECT accepted at open, refused (EINVAL) at the first write: the header write is the probe. */
static void refused_at_write(void)
{
	char *dir = t_tmpdir("fb-write");
	if (!direct_works(dir)) {
		printf("refused at write: the test directory takes no O_DIRECT, skipped\n");
		t_rmrf(dir);
		free(dir);
		return;
	}
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2));
	struct tp_set *a = tp_set_new(4, 400000, 21);
	ckpt_io_fault_arm(IO_FAULT_WRITE, 1, EINVAL);
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, a, &st));
	unsigned long fired = ckpt_io_fault_fired();
	ckpt_io_fault_disarm();
	CHECK(fired == 1);
	CHECK(st.direct_io == 0);
	tp_check(s, 1, a);
	/* The handle stays on buffered I/O. */
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 2, 3);
	CHECK_OK(tp_save(s, 2, b, &st));
	CHECK(st.direct_io == 0);
	tp_check(s, 2, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	t_rmrf(dir);
	free(dir);
}

static void normal_dir(void)
{
	char *dir = t_tmpdir("fb-normal");
	int expect = direct_works(dir);
	char d0[4200], d1[4200];
	snprintf(d0, sizeof d0, "%s/off", dir);
	snprintf(d1, sizeof d1, "%s/default", dir);
	CHECK(save_and_check(d0, 2, CKPT_ENGINE_AUTO) == 0);
	CHECK(save_and_check(d1, 0, CKPT_ENGINE_AUTO) == expect);
	printf("normal directory: O_DIRECT %s\n", expect ? "used by default" : "unavailable");
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	normal_dir();
	refused_at_write();
	on_fs("tmpfs");
	on_fs("ramfs");
	return t_done();
}
