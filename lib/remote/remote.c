/* rmt_open: the backend for a url's scheme, from one table, with the config's defaults filled in
 * (remote.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "remote/remote.h"

/* The backends, by scheme. The S3 backend joins with one line here. */
static const struct rmt_ops *const backends[] = {
	&rmt_file_ops,
	&rmt_s3_ops,
};

/* The backend whose scheme starts url ("scheme://"), or file for an absolute path; NULL with
 * the message naming the url and the schemes there are. */
static const struct rmt_ops *pick(const char *url)
{
	if (url[0] == '/')
		return &rmt_file_ops;
	const char *sep = strstr(url, "://");
	size_t n = sep ? (size_t)(sep - url) : 0;
	for (size_t i = 0; sep && i < ARRAY_SIZE(backends); i++)
		if (strlen(backends[i]->scheme) == n && !strncmp(backends[i]->scheme, url, n))
			return backends[i];
	char names[256] = "";
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++) {
		size_t l = strlen(names);
		snprintf(names + l, sizeof names - l, "%s%s://", i ? ", " : "", backends[i]->scheme);
	}
	ckpt_fail(CKPT_E_INVAL, "remote %s: %s (the schemes are %s, or an absolute path)", url,
		  sep ? "unknown scheme" : "not a url", names);
	return NULL;
}

int rmt_open(const char *url, const struct rmt_config *cfg, struct rmt **out)
{
	*out = NULL;
	if (!url || !*url)
		return ckpt_fail(CKPT_E_INVAL, "remote: empty url");
	const struct rmt_ops *ops = pick(url);
	if (!ops)
		return -CKPT_E_INVAL;
	struct rmt_config c = cfg ? *cfg : (struct rmt_config){0};
	rmt_config_defaults(&c);
	return ops->open(url, &c, out);
}

void rmt_close(struct rmt *r)
{
	if (r)
		r->ops->close(r);
}

int rmt_del_cleanup(struct rmt *r, const char *key)
{
	return r->ops->del_cleanup ? r->ops->del_cleanup(r, key) : r->ops->del(r, key);
}
