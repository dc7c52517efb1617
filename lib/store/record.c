/* The writer record: who holds the store's LOCK or an in-flight
 * marker, as "pid N\nhost H\nwhat W\nsince YYYY-MM-DDTHH:MM:SSZ\nnode B\n", node being the boot
 * id (markers and reader leases from another node are judged by age, not flock). Below lock.c,
 * marker.c and lease.c, which write and read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"

void store_host(char *buf, size_t len)
{
	if (gethostname(buf, len - 1))
		snprintf(buf, len, "?");
	buf[len - 1] = 0;
	for (char *c = buf; *c; c++) /* one word: the record is "key value" lines */
		if (*c <= ' ' || *c > '~')
			*c = '?';
}

const char *store_node(struct ckpt_store *s)
{
	if (s->lock.node[0])
		return s->lock.node;
	char buf[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = 0;
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
	if (!buf[0] || strlen(buf) >= sizeof s->lock.node)
		store_host(buf, sizeof s->lock.node);
	snprintf(s->lock.node, sizeof s->lock.node, "%s", buf);
	return s->lock.node;
}

int store_format_record(struct ckpt_store *s, const char *what, char *buf, size_t len)
{
	char host[96], since[32] = "?", w[64];
	time_t now = time(NULL);
	struct tm tm;
	store_host(host, sizeof host);
	if (gmtime_r(&now, &tm))
		strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (s->lock.part_mode && strncmp(what, "reader", 6)) /* a reader's lease says what it reads */
		snprintf(w, sizeof w, "multi-rank save, rank %u,", s->lock.part_rank);
	else
		snprintf(w, sizeof w, "%s", what);
	int n = snprintf(buf, len, "pid %ld\nhost %s\nwhat %s\nsince %s\nnode %s\n", (long)getpid(),
			 host, w, since, store_node(s));
	if (n < 0 || (size_t)n >= len) {
		buf[0] = 0;
		return 0;
	}
	return n;
}

bool store_parse_record(char *buf, struct writer_rec *r)
{
	memset(r, 0, sizeof *r);
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		if (!strncmp(line, "pid ", 4))
			r->pid = strtol(line + 4, NULL, 10);
		else if (!strncmp(line, "host ", 5))
			snprintf(r->host, sizeof r->host, "%s", line + 5);
		else if (!strncmp(line, "node ", 5))
			snprintf(r->node, sizeof r->node, "%s", line + 5);
		else if (!strncmp(line, "what ", 5))
			snprintf(r->what, sizeof r->what, "%s", line + 5);
		else if (!strncmp(line, "since ", 6))
			snprintf(r->since, sizeof r->since, "%s", line + 6);
	}
	return r->pid > 0 && r->host[0] && r->what[0] && r->since[0];
}
