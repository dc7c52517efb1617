/* Options: defaults, ranges, and the machine defaults that `nvmetune bench` writes. */
#include "helpers.h"

#include <unistd.h>

#include "store/store.h"

int main(void)
{
	char *dir = t_tmpdir("opts");
	char conf[4200];
	snprintf(conf, sizeof conf, "%s/libckpt.conf", dir);
	FILE *f = fopen(conf, "w");
	fprintf(f, "# written by nvmetune bench\nio_queue_depth = 32\nio_size_bytes = 4194304\n"
		   "unknown_key = 7\nio_queue_depth_typo 9\n");
	fclose(f);
	setenv("CKPT_CONFIG", conf, 1);
	ckpt_options *o = ckpt_options_create();
	CHECK(o->queue_depth == 32);
	CHECK(o->io_size == 4u << 20);
	/* Explicit options win over the file. */
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_QUEUE_DEPTH, 4));
	CHECK(o->queue_depth == 4);
	ckpt_options_free(o);

	/* Out-of-range values in the file are ignored, not fatal. */
	f = fopen(conf, "w");
	fprintf(f, "io_queue_depth = 100000\nio_size_bytes = 1000\n");
	fclose(f);
	o = ckpt_options_create();
	CHECK(o->queue_depth == 8);
	CHECK(o->io_size == 8u << 20);
	ckpt_options_free(o);
	setenv("CKPT_CONFIG", "/nonexistent/libckpt.conf", 1);
	o = ckpt_options_create();
	CHECK(o->queue_depth == 8);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_THREADS, 0), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 1000), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_IO_ENGINE, 9), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_IO_SIZE, 4097), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_add_data_dir(o, ""), -CKPT_E_INVAL);
	CHECK_OK(ckpt_options_add_data_dir(o, "/tmp/x"));
	ckpt_options_free(o);
	CHECK(ckpt_mem_supported(CKPT_MEM_HOST) == 1);
	CHECK(ckpt_mem_supported(-7) == 0);
	CHECK(ckpt_mem_supported(99) == 0);
	unlink(conf);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
