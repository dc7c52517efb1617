/* The GPU ops table without a GPU: the host provider's ops, the loader of the CUDA module
 * (CKPT_CUDA_MODULE=none, a bogus path, a library that is not a module, the real module), and the
 * real module called directly: on a machine without a driver or device its init must fail or
 * return 0 gracefully, and its ops must not crash. Runs everywhere; on a GPU machine it checks that
 * the module loads. Each loader case runs in a child process (the loader runs once per process). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "helpers.h"

static char module_path[4096];
static int module_devices = -1000; /* init() of the real module, -1000: not built */

/* --- the host provider --------------------------------------------------------------------- */

static void test_host_provider(void)
{
	const struct ckpt_gpu_ops *h = ckpt_gpu_host();
	REQUIRE(h);
	CHECK(h->abi == CKPT_GPU_ABI);
	CHECK(!strcmp(h->name, "host"));
	CHECK(h->init(NULL) == 0);
	static const size_t sizes[] = { 1, 4095, 4096, 4097, 1000003, 8u << 20 };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i];
		void *p = NULL, *q = NULL;
		CHECK_OK(h->alloc_pinned(n, &p));
		CHECK_OK(h->alloc_pinned(n, &q));
		REQUIRE(p && q);
		CHECK(((uintptr_t)p & 4095u) == 0);
		CHECK(((uintptr_t)q & 4095u) == 0);
		char *src = malloc(n);
		REQUIRE(src);
		t_fill(src, n, 7 + i);
		/* Every byte of exactly n is usable (ASan catches an overrun). */
		CHECK_OK(h->copy_h2d(p, src, n, NULL));
		CHECK_OK(h->copy_d2h(q, p, n, NULL));
		CHECK(memcmp(q, src, n) == 0);
		CHECK(h->mem_device(p) == -1);
		free(src);
		h->free_pinned(p, n);
		h->free_pinned(q, n);
	}
	h->free_pinned(NULL, 0);
	void *s = (void *)1;
	CHECK_OK(h->stream_create(CKPT_MEM_HOST, &s));
	CHECK(s == NULL);
	CHECK_OK(h->stream_after(s, NULL));
	CHECK_OK(h->stream_sync(s));
	h->stream_destroy(s);
	/* CUDA memory through the host provider is refused with a reason. */
	CHECK_RC(h->stream_create(0, &s), -CKPT_E_UNSUPPORTED);
	CHECK(strstr(ckpt_errmsg(), "CUDA") != NULL);
	CHECK_RC(h->wait_flag(NULL, 0, NULL, 1), -CKPT_E_UNSUPPORTED);
	CHECK(h->mem_device(NULL) == -1);
}

/* --- the real module, called directly ------------------------------------------------------ */

static char fail_msg[1024];
static int fail_err;
static int test_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
	va_end(ap);
	fail_err = err;
	return -err;
}

static void test_module_direct(void)
{
	if (!module_path[0])
		return;
	void *h = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", module_path, dlerror());
		CHECK(h != NULL);
		return;
	}
	const struct ckpt_gpu_ops *(*entry)(void) =
		(const struct ckpt_gpu_ops *(*)(void))dlsym(h, CKPT_GPU_ENTRY);
	REQUIRE(entry);
	const struct ckpt_gpu_ops *m = entry();
	REQUIRE(m);
	CHECK(m->abi == CKPT_GPU_ABI);
	CHECK(!strcmp(m->name, "cuda"));
	CHECK(m->init && m->alloc_pinned && m->free_pinned && m->stream_create && m->stream_destroy &&
	      m->stream_after && m->copy_d2h && m->copy_h2d && m->stream_sync && m->mem_device &&
	      m->host_register && m->host_unregister && m->wait_flag && m->mark && m->mark_wait);
	/* Only the entry point is visible. */
	CHECK(dlsym(h, "cu_init") == NULL);

	fail_msg[0] = 0;
	int n = m->init(test_fail);
	module_devices = n;
	printf("module init: %d (%s)\n", n, fail_msg[0] ? fail_msg : "no message");
	if (n < 0) {
		CHECK(-n == fail_err);
		CHECK(strncmp(fail_msg, "cuda: cudaGetDeviceCount: ", 26) == 0);
	}

	int x = 0;
	CHECK(m->mem_device(&x) == -1);
	CHECK(m->mem_device(NULL) == -1);
	void *s = (void *)1;
	CHECK_OK(m->stream_create(CKPT_MEM_HOST, &s));
	CHECK(s == NULL);
	m->stream_destroy(NULL);
	m->free_pinned(NULL, 0);
	CHECK_OK(m->copy_d2h(&x, &x, 0, NULL));
	void *p = (void *)1;
	CHECK(m->alloc_pinned(0, &p) == -CKPT_E_INVAL);
	CHECK(p == NULL);

	if (n <= 0) {
		/* No driver or device: every op that needs CUDA fails with a message, never crashes. */
		fail_msg[0] = 0;
		int rc = m->alloc_pinned(4097, &p);
		printf("alloc_pinned without a device: %d (%s)\n", rc, fail_msg);
		CHECK(rc < 0);
		CHECK(p == NULL);
		CHECK(strncmp(fail_msg, "cuda: cudaHostAlloc: ", 21) == 0);
		fail_msg[0] = 0;
		rc = m->stream_create(0, &s);
		printf("stream_create without a device: %d (%s)\n", rc, fail_msg);
		CHECK(rc < 0);
		CHECK(s == NULL);
		CHECK(strncmp(fail_msg, "cuda: ", 6) == 0);
		return;
	}

	/* With a device: pinned memory of exactly the size, a stream, a mark and its wait, sync. */
	CHECK_OK(m->alloc_pinned(4097, &p));
	REQUIRE(p);
	CHECK(((uintptr_t)p & 4095u) == 0);
	memset(p, 0x5a, 4097);
	CHECK(m->mem_device(p) == -1);
	m->free_pinned(p, 4097);
	CHECK_OK(m->stream_create(0, &s));
	REQUIRE(s);
	CHECK_OK(m->stream_after(s, NULL));
	void *mk = NULL;
	CHECK_OK(m->mark(s, &mk));
	CHECK_OK(m->mark_wait(mk));
	CHECK_OK(m->stream_sync(s));
	m->stream_destroy(s);
	CHECK(m->stream_create(n + 5, &s) == -CKPT_E_INVAL);
	/* The module stays loaded (-z nodelete); dlclose must be harmless. */
	dlclose(h);
}

/* --- the loader ---------------------------------------------------------------------------- */

/* Runs the loader in a child with CKPT_CUDA_MODULE=env (NULL: unset); returns 1 when it loaded a
 * provider, 0 when not, and copies the reason. */
static int load_in_child(const char *env, char *reason, size_t cap)
{
	int fd[2];
	REQUIRE(pipe(fd) == 0);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		if (env)
			setenv("CKPT_CUDA_MODULE", env, 1);
		else
			unsetenv("CKPT_CUDA_MODULE");
		const struct ckpt_gpu_ops *ops = ckpt_gpu_cuda();
		const char *why = ckpt_gpu_cuda_error();
		char buf[1024];
		int len = snprintf(buf, sizeof buf, "%s", ops ? ops->name : why ? why : "(null)");
		if (write(fd[1], buf, (size_t)len) != len)
			_exit(3);
		/* Second call: same answer, no reload. */
		_exit(ckpt_gpu_cuda() == ops ? (ops ? 1 : 0) : 2);
	}
	close(fd[1]);
	size_t got = 0;
	ssize_t r;
	while (got + 1 < cap && (r = read(fd[0], reason + got, cap - 1 - got)) > 0)
		got += (size_t)r;
	reason[got] = 0;
	close(fd[0]);
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid);
	REQUIRE(WIFEXITED(st));
	CHECK(WEXITSTATUS(st) <= 1);
	return WEXITSTATUS(st) == 1;
}

/* Loader outcome for the real module, compared with its direct init() afterwards (the children
 * run first: a child forked after CUDA was initialized in its parent cannot use CUDA). */
static int real_loaded = -1;
static char real_why[1024];

static void test_loader(void)
{
	char why[1024];
	const char *b = getenv("B");
	snprintf(module_path, sizeof module_path, "%s/lib/%s", b && *b ? b : "build", CKPT_GPU_MODULE);
	if (access(module_path, F_OK) != 0) {
		printf("note: %s not built (no CUDA toolkit or CUDA=0): module checks skipped\n",
		       module_path);
		module_path[0] = 0;
	}

	int ok = load_in_child("none", why, sizeof why);
	printf("CKPT_CUDA_MODULE=none: %s\n", why);
	CHECK(!ok);
	CHECK(strstr(why, "CKPT_CUDA_MODULE=none") != NULL);

	ok = load_in_child("/nonexistent/dir/libckpt-cuda-bogus.so", why, sizeof why);
	printf("bogus path: %s\n", why);
	CHECK(!ok);
	CHECK(strstr(why, "/nonexistent/dir/libckpt-cuda-bogus.so") != NULL);

	/* A library that is not a module. */
	ok = load_in_child("libm.so.6", why, sizeof why);
	printf("not a module: %s\n", why);
	CHECK(!ok);
	CHECK(strstr(why, "entry point") != NULL);

	/* Default search: beside the (static) test program, then the system's library path. */
	ok = load_in_child(NULL, why, sizeof why);
	printf("default search: %s\n", ok ? "loaded" : why);
	if (ok)
		CHECK(!strcmp(why, "cuda"));
	else
		CHECK(why[0] != 0);

	if (!module_path[0])
		return;
	real_loaded = load_in_child(module_path, real_why, sizeof real_why);
	printf("real module: %s\n", real_loaded ? "loaded" : real_why);
}

static void check_real_module(void)
{
	if (module_devices == -1000)
		return;
	if (module_devices > 0) {
		CHECK(real_loaded == 1);
		CHECK(!strcmp(real_why, "cuda"));
	} else {
		CHECK(real_loaded == 0);
		CHECK(strstr(real_why, "no CUDA device") != NULL);
		if (module_devices < 0)
			CHECK(strstr(real_why, "cuda: cudaGetDeviceCount: ") != NULL);
	}
}

int main(void)
{
	/* The loader children first: nothing in this process may have run the loader (the host
	 * provider's refusals name the CUDA reason, so they run it) or initialized CUDA yet. */
	unsetenv("CKPT_CUDA_MODULE");
	test_loader();
	test_module_direct();
	check_real_module();
	test_host_provider();
	/* This process's own loader (default search) answers consistently. */
	const struct ckpt_gpu_ops *ops = ckpt_gpu_cuda();
	CHECK(ops == NULL ? ckpt_gpu_cuda_error()[0] != 0 : ckpt_gpu_cuda_error()[0] == 0);
	return t_done();
}
