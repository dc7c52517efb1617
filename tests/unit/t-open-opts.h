/* Opens (creating) a store with a list of options: pairs of ckpt_option and value ending with 0.
 * For tests that tune several options at once (tests/unit/dist/t-dist-wide.c, t-dist-packids.c). */
#ifndef T_OPEN_OPTS_H
#define T_OPEN_OPTS_H

#include "helpers.h"

static ckpt_store *t_open_opts(const char *dir, const int64_t *kv)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o && ckpt_options_set(o, CKPT_OPT_CREATE, 1) == 0);
	for (; kv[0]; kv += 2)
		REQUIRE(ckpt_options_set(o, (ckpt_option)kv[0], kv[1]) == 0);
	ckpt_store *s = NULL;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0 && s);
	ckpt_options_free(o);
	return s;
}

#endif
