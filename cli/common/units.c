/* Numbers, sizes and times as the user writes and reads them: cli_parse_u64, cli_parse_size,
 * cli_fmt_iec, cli_fmt_time. The lowest file of cli/common: it uses no other, so that the
 * progress line and the option parser can both build on it. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_parse_u64(const char *s, uint64_t *out)
{
	/* Digits only: strtoull alone would take " 7" (leading space) or "+7" for 7. */
	if (!s || *s < '0' || *s > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
	if (!s || ((*s < '0' || *s > '9') && *s != '.'))
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	uint64_t mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	case 't': case 'T': mult = 1ull << 40; end++; break;
	case 'b': case 'B': if (end[1] == 0) end++; break;
	default: break;
	}
	if (mult > 1 && (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib")))
		end += strlen(end);
	if (*end)
		return -1;
	double r = v * (double)mult;
	if (r >= 18446744073709551615.0)
		return -1;
	if (mult == 1 && r != (double)(uint64_t)r)
		return -1;
	*out = (uint64_t)r;
	return 0;
}

const char *cli_fmt_iec(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	double v = (double)bytes;
	int u = 0;
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *cli_fmt_time(int64_t unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", (long long)unix_s);
	return buf;
}
