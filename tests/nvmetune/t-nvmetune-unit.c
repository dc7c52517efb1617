/* Unit tests of nvmetune's pure parts: natural sorting, "[a] b" attributes, the state file
 * (round trip, and every kind of bad file rejected), profile files, argv quoting, atomic writes.
 * Linked with the tool's objects except main.o. Exit 0 pass, 1 fail. */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                         \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
			failures++;                                                         \
		}                                                                           \
	} while (0)

static char dir[] = "/tmp/nvmetune-unit.XXXXXX";

static void put(const char *name, const char *text)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
}

static void test_natcmp(void)
{
	const char *v[] = {"nvme10n1", "nvme2n1", "md127", "nvme1n10", "nvme1n2", "md0"};
	qsort(v, 6, sizeof(v[0]), natcmp);
	const char *want[] = {"md0", "md127", "nvme1n2", "nvme1n10", "nvme2n1", "nvme10n1"};
	for (int i = 0; i < 6; i++)
		CHECK(!strcmp(v[i], want[i]));
}

static void test_bracket(void)
{
	char b[32];
	bracket_value("[none] mq-deadline kyber", b, sizeof(b));
	CHECK(!strcmp(b, "none"));
	bracket_value("none [mq-deadline] kyber", b, sizeof(b));
	CHECK(!strcmp(b, "mq-deadline"));
	bracket_value("  none\n", b, sizeof(b));
	CHECK(!strcmp(b, "none"));
	bracket_value("default [performance] powersave", b, sizeof(b));
	CHECK(!strcmp(b, "performance"));
	CHECK(bracket_has("[none] mq-deadline kyber", "kyber"));
	CHECK(bracket_has("[none] mq-deadline kyber", "none"));
	CHECK(!bracket_has("[none] mq-deadline kyber", "bfq"));
	CHECK(!bracket_has("[none] mq-deadline kyber", "mq"));
}

static void test_state(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/sub/dir/state.json", dir);
	struct state st;
	memset(&st, 0, sizeof(st));
	snprintf(st.profile, sizeof(st.profile), "/etc/my \"odd\" profile\\x");
	snprintf(st.created, sizeof(st.created), "2026-12-01T00:00:00Z");
	struct item it;
	memset(&it, 0, sizeof(it));
	it.knob = K_WRITE_CACHE;
	it.order = 2000107;
	snprintf(it.dev, sizeof(it.dev), "nvme0n1");
	snprintf(it.key, sizeof(it.key), "sys:block/nvme0n1/queue/write_cache");
	snprintf(it.cur, sizeof(it.cur), "write through");
	state_add(&st, &it);
	snprintf(it.cur, sizeof(it.cur), "write back"); /* the first saved value wins */
	state_add(&st, &it);
	it.knob = K_VWC;
	it.order = 1000002;
	snprintf(it.dev, sizeof(it.dev), "nvme0");
	snprintf(it.key, sizeof(it.key), "nvme:nvme0:vwc");
	snprintf(it.cur, sizeof(it.cur), "off");
	state_add(&st, &it);
	CHECK(st.n == 2);
	CHECK(state_save(p, &st) == 0); /* creates the directories */
	state_free(&st);

	struct state ld;
	CHECK(state_load(p, &ld) == 0);
	CHECK(ld.n == 2);
	CHECK(!strcmp(ld.profile, "/etc/my \"odd\" profile\\x"));
	CHECK(!strcmp(ld.created, "2026-12-01T00:00:00Z"));
	CHECK(ld.n == 2 && ld.s[0].knob == K_WRITE_CACHE && !strcmp(ld.s[0].prev, "write through") &&
	      ld.s[0].order == 2000107 && !strcmp(ld.s[0].dev, "nvme0n1"));
	CHECK(ld.n == 2 && ld.s[1].knob == K_VWC && !strcmp(ld.s[1].key, "nvme:nvme0:vwc"));
	state_free(&ld);

	snprintf(p, sizeof(p), "%s/missing.json", dir);
	CHECK(state_load(p, &ld) == -ENOENT);
	static const char *bad[] = {
		"",
		"not json",
		"{\"version\": 1, \"saved\": [",
		"{\"version\": 2, \"saved\": []}",
		"{\"saved\": []}",
		"{\"version\": 1, \"saved\": {}}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"turbo\", \"device\": \"a\", \"key\": \"sys:x\", \"previous\": \"1\", \"order\": 1}]}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"scheduler\", \"device\": \"a\", \"key\": \"sys:../../etc/passwd\", \"previous\": \"1\", \"order\": 1}]}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"scheduler\", \"device\": \"a\", \"key\": \"/etc/passwd\", \"previous\": \"1\", \"order\": 1}]}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"scheduler\", \"device\": \"a\", \"key\": \"sys:x\", \"order\": 1}]}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"scheduler\", \"device\": \"a\", \"key\": \"sys:x\", \"previous\": 5, \"order\": 1}]}",
		"{\"version\": 1, \"saved\": [{\"knob\": \"scheduler\", \"device\": \"a\", \"key\": \"sys:x\", \"previous\": \"\\u00e9\", \"order\": 1}]}",
		"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		put("bad.json", bad[i]);
		snprintf(p, sizeof(p), "%s/bad.json", dir);
		int rc = state_load(p, &ld);
		if (rc != -EINVAL)
			fprintf(stderr, "bad state %zu accepted (rc %d)\n", i, rc);
		CHECK(rc == -EINVAL);
	}
}

static void test_profiles(void)
{
	struct profile p;
	char path[PATH_MAX];
	CHECK(profile_load(NULL, &p) == EXIT_OK && p.t[K_SCHEDULER].kind == TG_AUTO &&
	      p.t[K_NR_REQUESTS].kind == TG_KEEP && !strcmp(p.name, "checkpoint"));
	CHECK(profile_load("default", &p) == EXIT_OK && p.t[K_READ_AHEAD].kind == TG_DEFAULT &&
	      p.t[K_VWC].kind == TG_KEEP);
	put("good.profile", "# comment\ninherit = checkpoint\n\n  scheduler = mq-deadline  # why\n"
			    "nr_requests=256\nwrite_cache = write through\nread_ahead_kb = keep\n"
			    "max_sectors_kb = default\napst = on\naspm = powersave\nvwc = off\n");
	snprintf(path, sizeof(path), "%s/good.profile", dir);
	CHECK(profile_load(path, &p) == EXIT_OK);
	CHECK(p.t[K_SCHEDULER].kind == TG_VALUE && !strcmp(p.t[K_SCHEDULER].value, "mq-deadline"));
	CHECK(p.t[K_NR_REQUESTS].kind == TG_VALUE && !strcmp(p.t[K_NR_REQUESTS].value, "256"));
	CHECK(p.t[K_WRITE_CACHE].kind == TG_VALUE && !strcmp(p.t[K_WRITE_CACHE].value, "write through"));
	CHECK(p.t[K_READ_AHEAD].kind == TG_KEEP && p.t[K_MAX_SECTORS].kind == TG_DEFAULT);
	CHECK(p.t[K_APST].kind == TG_VALUE && p.t[K_ASPM].kind == TG_VALUE && p.t[K_VWC].kind == TG_VALUE);
	put("empty.profile", "# keeps everything\n");
	snprintf(path, sizeof(path), "%s/empty.profile", dir);
	CHECK(profile_load(path, &p) == EXIT_OK);
	for (int k = 0; k < K_COUNT; k++)
		CHECK(p.t[k].kind == TG_KEEP);
	static const char *bad[] = {
		"scheduler\n", "turbo = 1\n", "nr_requests = 0\n", "nr_requests = -4\n",
		"max_sectors_kb = 1k\n", "write_cache = on\n", "aspm = max\n", "apst = 1\n",
		"vwc = default\n", "scheduler = mq deadline\n", "scheduler = a;b\n",
		"apst = off\ninherit = checkpoint\n", "inherit = turbo\n",
	};
	/* the line number counts blank lines */
	put("lines.profile", "# c\n\n\nscheduler = none\n\nbogus = 1\n");
	snprintf(path, sizeof(path), "%s/lines.profile", dir);
	fflush(stderr);
	FILE *saved = stderr;
	char *ebuf = NULL;
	size_t elen = 0;
	stderr = open_memstream(&ebuf, &elen);
	int lrc = profile_load(path, &p);
	fclose(stderr);
	stderr = saved;
	CHECK(lrc == EXIT_USAGE && strstr(ebuf, "lines.profile:6: unknown knob 'bogus'"));
	free(ebuf);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		put("bad.profile", bad[i]);
		snprintf(path, sizeof(path), "%s/bad.profile", dir);
		int rc = profile_load(path, &p);
		if (rc != EXIT_USAGE)
			fprintf(stderr, "bad profile %zu accepted (rc %d)\n", i, rc);
		CHECK(rc == EXIT_USAGE);
	}
	snprintf(path, sizeof(path), "%s/nope.profile", dir);
	CHECK(profile_load(path, &p) == EXIT_NOTFOUND);
	CHECK(profile_load("turbo", &p) == EXIT_USAGE);
}

static void test_argv_and_files(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	char *av[] = {"mdadm", "--create", "/dev/md0", "--name=it's mine", "a b", "", NULL};
	print_argv(f, av);
	fclose(f);
	CHECK(!strcmp(buf, "mdadm --create /dev/md0 '--name=it'\\''s mine' 'a b' ''\n"));
	free(buf);
	CHECK(!strcmp(errno_name(EINVAL), "EINVAL") && errno_from_name("EPERM") == EPERM &&
	      errno_from_name("EWHAT") == -1);

	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/a/b/c.conf", dir);
	CHECK(write_file_atomic(p, "x = 1\n", 6, 0644) == 0);
	CHECK(write_file_atomic(p, "y = 2\n", 6, 0644) == 0);
	char *data;
	size_t n;
	CHECK(read_file(p, &data, &n) == 0 && n == 6 && !strcmp(data, "y = 2\n"));
	free(data);
	char *t[] = {"true", NULL}, *fa[] = {"false", NULL}, *none[] = {"/nonexistent/prog", NULL};
	CHECK(run_argv(t) == 0);
	CHECK(run_argv(fa) == 1);
	CHECK(run_argv(none) == -ENOENT);
}

/* modules.dep / modules.builtin lines name modules by path; '-' and '_' are the same; a longer
 * name with the same start (raid10 for raid1, md_mod_x) is another module. */
static void test_modlist(void)
{
	const char *dep = "kernel/drivers/md/raid10.ko.xz: kernel/drivers/md/md-mod.ko.xz\n"
			  "kernel/drivers/md/md-mod.ko.xz:\n"
			  "kernel/lib/raid6/raid6_pq.ko:\n"
			  "updates/dkms/zfs.ko.zst: updates/dkms/spl.ko.zst";
	CHECK(nt_modlist_has(dep, "md_mod"));
	CHECK(nt_modlist_has(dep, "md-mod"));
	CHECK(nt_modlist_has(dep, "raid10"));
	CHECK(!nt_modlist_has(dep, "raid1"));
	CHECK(!nt_modlist_has(dep, "raid0"));
	CHECK(!nt_modlist_has(dep, "raid6"));
	CHECK(nt_modlist_has(dep, "raid6_pq"));
	CHECK(nt_modlist_has(dep, "zfs"));
	CHECK(!nt_modlist_has(dep, "spl")); /* only a dependency on that line: not a module line */
	CHECK(nt_modlist_has("kernel/drivers/md/md-mod.ko\nkernel/drivers/md/raid0.ko\n", "raid0"));
	CHECK(!nt_modlist_has("kernel/drivers/md/md-mod.kox\n", "md_mod"));
	CHECK(!nt_modlist_has("", "md_mod"));
	CHECK(!nt_modlist_has(NULL, "md_mod"));
}

/* A permission error under root is not cured by running as root: the advice names what denies
 * root (a device cgroup or security policy; a read-only mount) instead. As root, a write check
 * of an immutable file (EPERM for root too) shows it, where the file system has the flag. */
static void test_perm_hint(void)
{
	char b[160];
	CHECK(!strcmp(nt_perm_hint(EACCES, false, b, sizeof(b)), "run as root"));
	CHECK(!strcmp(nt_perm_hint(EPERM, false, b, sizeof(b)), "run as root"));
	CHECK(!strstr(nt_perm_hint(EPERM, true, b, sizeof(b)), "run as root"));
	CHECK(strstr(b, "device cgroup") && strstr(b, "running as root"));
	CHECK(strstr(nt_perm_hint(EROFS, true, b, sizeof(b)), "read-only"));
	if (geteuid() != 0)
		return;
	char p[PATH_MAX], log[PATH_MAX];
	snprintf(p, sizeof(p), "%s/immutable", dir);
	snprintf(log, sizeof(log), "%s/stderr", dir);
	put("immutable", "x");
	int fd = open(p, O_RDONLY), flags = 0;
	bool set = fd >= 0 && !ioctl(fd, FS_IOC_GETFLAGS, &flags) &&
		   !ioctl(fd, FS_IOC_SETFLAGS, &(int){flags | FS_IMMUTABLE_FL});
	if (set) {
		fflush(stderr);
		int saved = dup(2), lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(lfd, 2);
		int rc = nt_check_writable("t", p, NULL);
		fflush(stderr);
		dup2(saved, 2);
		close(saved);
		close(lfd);
		char *text = NULL;
		size_t len;
		CHECK(rc == EXIT_PERM);
		CHECK(!read_file(log, &text, &len) && text && !strstr(text, "run as root") &&
		      strstr(text, "device cgroup"));
		free(text);
		ioctl(fd, FS_IOC_SETFLAGS, &flags);
	} else {
		printf("(no immutable flag on %s: the root case of nt_check_writable is not run)\n", dir);
	}
	if (fd >= 0)
		close(fd);
}

int main(void)
{
	cli_prog = "nvmetune";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_natcmp();
	test_bracket();
	test_state();
	test_profiles();
	test_argv_and_files();
	test_modlist();
	test_perm_hint();
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", dir);
	printf("%s\n", failures ? "FAILED" : "all passed");
	return failures ? 1 : 0;
}
