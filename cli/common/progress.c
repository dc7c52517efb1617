/* A progress bar for long operations, shown only on a terminal. */
#include "cli.h"

#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void progress_start(struct progress *p, const char *label, uint64_t total, bool enable)
{
	p->on = enable && isatty(STDERR_FILENO);
	p->label = label;
	p->total = total;
	p->done = 0;
	p->start = now_s();
	p->last_draw = 0;
}

static void draw(struct progress *p)
{
	char a[32], b[32];
	int width = 30;
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	if (frac > 1)
		frac = 1;
	int fill = (int)(frac * width);
	fprintf(stderr, "\r%s [", p->label);
	for (int i = 0; i < width; i++)
		fputc(i < fill ? '#' : '.', stderr);
	fprintf(stderr, "] %3d%% %s / %s ", (int)(frac * 100), cli_fmt_iec(p->done, a, sizeof a),
		cli_fmt_iec(p->total, b, sizeof b));
	fflush(stderr);
}

void progress_update(struct progress *p, uint64_t done)
{
	if (!p->on)
		return;
	p->done = done;
	double t = now_s();
	if (t - p->last_draw < 0.1)
		return;
	p->last_draw = t;
	draw(p);
}

void progress_end(struct progress *p)
{
	if (!p->on)
		return;
	p->done = p->total;
	draw(p);
	fputc('\n', stderr);
}
