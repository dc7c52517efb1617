/* gpu-probe DIR: a program linked with libckpt.so only (not libcudart), for tests/gpu/t-no-cudart.sh.
 * It saves and restores a host tensor in a store under DIR, adds a tensor in CUDA device 0 memory
 * (the CUDA provider is loaded then, from beside libckpt.so), and says whether libcudart was mapped
 * into the process before and after. Output: key=value lines. */
#include <ckpt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mapped(const char *name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[4096];
	int found = 0;
	while (fgets(line, sizeof line, f))
		if (strstr(line, name))
			found = 1;
	fclose(f);
	return found;
}

static int cudart_mapped(void)
{
	return mapped("libcudart");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gpu-probe DIR\n");
		return 2;
	}
	printf("cudart_before=%d\n", cudart_mapped());
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(argv[1], o, &s);
	ckpt_options_free(o);
	if (rc) {
		printf("open=%d %s\n", rc, ckpt_errmsg());
		return 1;
	}
	/* Host memory works whatever the GPU situation. */
	unsigned char data[1000], back[1000];
	for (int i = 0; i < 1000; i++)
		data[i] = (unsigned char)(i * 7);
	uint64_t shape[1] = { 1000 };
	ckpt_tensor h = { .struct_size = sizeof h, .name = "h", .dtype = CKPT_DTYPE_U8, .ndim = 1,
			  .shape = shape, .mem = CKPT_MEM_HOST, .data = data };
	ckpt_save *sv = NULL;
	int host_ok = 0;
	if (!ckpt_save_begin(s, 1, NULL, &sv) && !ckpt_save_add(sv, &h) &&
	    !ckpt_save_commit(sv, NULL)) {
		ckpt_reader *r = NULL;
		if (!ckpt_reader_open(s, 1, 0, &r) &&
		    !ckpt_reader_read(r, 0, NULL, CKPT_MEM_HOST, back, 1000))
			host_ok = !memcmp(data, back, 1000);
		ckpt_reader_close(r);
	}
	printf("host=%s\n", host_ok ? "ok" : ckpt_errmsg());
	printf("cudart_after_host=%d\n", cudart_mapped());
	/* Host-only saves never load the CUDA module (nor, through it, the driver: cuInit). */
	printf("module_after_host=%d\n", mapped("libckpt-cuda"));
	/* A CUDA tensor: accepted when a device is there, else refused with the reason. */
	sv = NULL;
	rc = ckpt_save_begin(s, 2, NULL, &sv);
	if (!rc) {
		ckpt_tensor d = { .struct_size = sizeof d, .name = "d", .dtype = CKPT_DTYPE_U8,
				  .ndim = 1, .shape = shape, .mem = 0, .data = (void *)0x10000 };
		rc = ckpt_save_add(sv, &d);
		printf("cuda_add=%d\ncuda_reason=%s\n", rc, rc ? ckpt_errmsg() : "");
		ckpt_save_abort(sv);
	} else {
		printf("begin=%d %s\n", rc, ckpt_errmsg());
	}
	printf("cudart_after_cuda=%d\n", cudart_mapped());
	ckpt_store_close(s);
	return host_ok ? 0 : 1;
}
