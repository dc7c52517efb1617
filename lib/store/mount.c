/* Whether the store's mount keeps flocks local to each node (store_mount_check): the writer
 * lock (lock.c) and the reader leases then exclude nothing across nodes, and only the in-flight
 * markers (marker.c) keep gc off saves in flight. Read from /proc/self/mountinfo (proc(5)):
 * "ID PARENT MAJ:MIN ROOT MOUNTPOINT MOUNTOPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS". */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

/* Undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *i = s; *i; i++) {
		if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] >= '0' && i[2] <= '7' &&
		    i[3] >= '0' && i[3] <= '7') {
			*o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
			i += 3;
		} else {
			*o++ = *i;
		}
	}
	*o = 0;
}

/* Whether the comma-separated list opts has the option word (exactly, or word=... when word
 * ends in '='). */
static bool has_opt(const char *opts, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = opts; p && *p;) {
		size_t n = strcspn(p, ",");
		if (n == wl && !strncmp(p, word, wl))
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

/* Whether path is mnt or below it. */
static bool under(const char *path, const char *mnt)
{
	size_t n = strlen(mnt);
	if (n == 1 && mnt[0] == '/')
		return true;
	return !strncmp(path, mnt, n) && (path[n] == '/' || !path[n]);
}

/* The mount a line describes: its mount point, options (per mount and per superblock) and type;
 * false for a line that is not one. Points into line. */
static bool parse_line(char *line, char **mnt, char **opts, char **fstype, char **super)
{
	char *sep = strstr(line, " - ");
	if (!sep)
		return false;
	*sep = 0;
	char *save = NULL, *f[6];
	f[0] = strtok_r(line, " ", &save);
	for (int i = 1; i < 6; i++)
		f[i] = f[i - 1] ? strtok_r(NULL, " ", &save) : NULL;
	char *save2 = NULL;
	*fstype = strtok_r(sep + 3, " \n", &save2);
	char *source = *fstype ? strtok_r(NULL, " \n", &save2) : NULL;
	*super = source ? strtok_r(NULL, " \n", &save2) : NULL;
	if (!f[5] || !*super)
		return false;
	unescape(f[4]);
	*mnt = f[4];
	*opts = f[5];
	return true;
}

/* Why locks are node-local on this mount (NULL: they are not, as far as its options say). */
static const char *local_locks(const char *fstype, const char *opts, const char *super)
{
	bool nfs = !strcmp(fstype, "nfs") || !strcmp(fstype, "nfs4");
	if (nfs && (has_opt(super, "local_lock=flock") || has_opt(opts, "local_lock=flock")))
		return "local_lock=flock";
	if (nfs && (has_opt(super, "local_lock=all") || has_opt(opts, "local_lock=all")))
		return "local_lock=all";
	if (nfs && (has_opt(super, "nolock") || has_opt(opts, "nolock")))
		return "nolock";
	if (!strcmp(fstype, "lustre") && (has_opt(super, "localflock") || has_opt(opts, "localflock")))
		return "localflock";
	return NULL;
}

char *store_mount_check(const char *mountinfo, const char *dir)
{
	char *real = realpath(dir, NULL);
	FILE *f = real ? fopen(mountinfo, "re") : NULL;
	if (!f) {
		free(real);
		return NULL;
	}
	char *line = NULL, best_mnt[PATH_MAX] = "", best_type[64] = "", why[32] = "";
	size_t cap = 0, best = 0;
	bool found = false;
	while (getline(&line, &cap, f) > 0) {
		char *mnt, *opts, *fstype, *super;
		if (!parse_line(line, &mnt, &opts, &fstype, &super) || !under(real, mnt) ||
		    strlen(mnt) < best)
			continue;
		/* The longest mount point holds the directory; of equal ones the last (mounted over
		 * the others). */
		best = strlen(mnt);
		found = true;
		snprintf(best_mnt, sizeof best_mnt, "%s", mnt);
		snprintf(best_type, sizeof best_type, "%s", fstype);
		const char *w = local_locks(fstype, opts, super);
		snprintf(why, sizeof why, "%s", w ? w : "");
	}
	free(line);
	fclose(f);
	char *msg = NULL;
	if (found && why[0] &&
	    asprintf(&msg, "store %s is on a %s mount (%s, %s): flocks there are local to each node, "
		     "so the store's writer lock does not exclude writers on other nodes; gc and prune "
		     "spare saves in flight by their markers only (see 'Shared file systems' in "
		     "docs/format.md)", real, best_type, best_mnt, why) < 0)
		msg = NULL;
	free(real);
	return msg;
}
