/* Where an S3 remote is and who we are there (lib/remote/s3_conf.c), without a server: the url,
 * the AWS environment variables and the profile files (AWS_PROFILE, ~/.aws/credentials,
 * ~/.aws/config with [profile x] sections and their s3 sub-section), in the order the AWS tools
 * use (docs/remote-s3.md), and a clear error for each bad input. */
#include "helpers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "remote/s3_int.h"

/* The environment of one case: "NAME=value" strings, NULL-terminated. */
static const char *const *fake;

static const char *fake_env(const char *name)
{
	size_t n = strlen(name);
	for (const char *const *e = fake; e && *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static int resolve(const char *url, struct s3_conf *c, const char *const *env)
{
	fake = env;
	return s3_conf_resolve_env(url, c, fake_env);
}

static char dir[4096], cred[4200], conf[4200], home[4200];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fputs(text, f);
	fclose(f);
}

static void test_env_only(void)
{
	struct s3_conf c;
	const char *env[] = { "AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK",
			      "AWS_SESSION_TOKEN=TOK", "AWS_REGION=eu-west-3",
			      "AWS_ENDPOINT_URL=http://127.0.0.1:7480/", home, NULL };
	CHECK_OK(resolve("s3://bkt/a/b", &c, env));
	CHECK(!strcmp(c.bucket, "bkt") && !strcmp(c.prefix, "a/b/"));
	CHECK(!strcmp(c.access_key, "AK") && !strcmp(c.secret_key, "SK") && !strcmp(c.token, "TOK"));
	CHECK(!strcmp(c.region, "eu-west-3") && !strcmp(c.endpoint, "http://127.0.0.1:7480"));
	CHECK(c.addressing == S3_ADDR_PATH && c.custom_endpoint && c.noreplace == -1 && !c.page);
	CHECK_OK(resolve("s3://bkt", &c, env));
	CHECK(!strcmp(c.prefix, ""));
	CHECK_OK(resolve("s3://bkt//x/y/?page=3&noreplace=check", &c, env));
	CHECK(!strcmp(c.prefix, "x/y/") && c.page == 3 && c.noreplace == 0);
	/* AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL; the url's endpoint before both */
	const char *env2[] = { "AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK",
			       "AWS_ENDPOINT_URL=http://a:1", "AWS_ENDPOINT_URL_S3=http://b:2",
			       "AWS_DEFAULT_REGION=ap-south-1", home, NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, env2));
	CHECK(!strcmp(c.endpoint, "http://b:2") && !strcmp(c.region, "ap-south-1"));
	CHECK_OK(resolve("s3://bkt/p?endpoint=https://c.example:3&region=us-west-2", &c, env2));
	CHECK(!strcmp(c.endpoint, "https://c.example:3") && !strcmp(c.region, "us-west-2"));
	/* no endpoint: AWS, virtual-hosted unless the bucket has a dot */
	const char *env3[] = { "AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK", home, NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, env3));
	CHECK(!strcmp(c.endpoint, "https://s3.us-east-1.amazonaws.com") && !c.custom_endpoint);
	CHECK(c.addressing == S3_ADDR_VIRTUAL && !strcmp(c.region, "us-east-1"));
	CHECK_OK(resolve("s3://my.bkt/p", &c, env3));
	CHECK(c.addressing == S3_ADDR_PATH);
	CHECK_OK(resolve("s3://bkt/p?addressing=path", &c, env3));
	CHECK(c.addressing == S3_ADDR_PATH);
	const char *env4[] = { "AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK", home,
			       "AWS_ENDPOINT_URL=http://localhost:9000",
			       "AWS_S3_ADDRESSING_STYLE=virtual", NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, env4));
	CHECK(c.addressing == S3_ADDR_VIRTUAL);
	CHECK_OK(resolve("s3://bkt/p?addressing=auto", &c, env4));
	CHECK(c.addressing == S3_ADDR_PATH);
}

static void test_profiles(void)
{
	write_file(cred, "# comment\n[default]\naws_access_key_id = DEFAK\naws_secret_access_key=DEFSK\n"
			 "\n[dev]\n  aws_access_key_id   =   DEVAK  \naws_secret_access_key = DEVSK\r\n"
			 "aws_session_token = DEVTOK\n[half]\naws_access_key_id = HALF\n");
	write_file(conf, "[default]\nregion = eu-north-1\n"
			 "[profile   dev]\nregion = us-west-1\ns3 =\n  endpoint_url = http://dev.example:9000\n"
			 "  addressing_style = virtual\nendpoint_url = http://ignored:1\n"
			 "[profile cfgkeys]\naws_access_key_id = CFGAK\naws_secret_access_key = CFGSK\n"
			 "endpoint_url = http://cfg.example:1\n; comment\n"
			 "[profile half]\naws_secret_access_key = HALFSK\n");
	char cf[4300], cr[4300];
	snprintf(cf, sizeof cf, "AWS_CONFIG_FILE=%s", conf);
	snprintf(cr, sizeof cr, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	struct s3_conf c;
	const char *def[] = { cf, cr, home, NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, def));
	CHECK(!strcmp(c.access_key, "DEFAK") && !strcmp(c.secret_key, "DEFSK") && !c.token[0]);
	CHECK(!strcmp(c.region, "eu-north-1") && !strcmp(c.profile, "default"));
	const char *dev[] = { cf, cr, home, "AWS_PROFILE=dev", NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, dev));
	CHECK(!strcmp(c.access_key, "DEVAK") && !strcmp(c.secret_key, "DEVSK"));
	CHECK(!strcmp(c.token, "DEVTOK") && !strcmp(c.region, "us-west-1"));
	CHECK(!strcmp(c.endpoint, "http://dev.example:9000") && c.addressing == S3_ADDR_VIRTUAL);
	/* keys in the environment win over AWS_PROFILE's, as for the AWS CLI; a url profile wins */
	const char *both[] = { cf, cr, home, "AWS_PROFILE=dev", "AWS_ACCESS_KEY_ID=ENVAK",
			       "AWS_SECRET_ACCESS_KEY=ENVSK", NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, both));
	CHECK(!strcmp(c.access_key, "ENVAK") && !c.token[0] && !strcmp(c.region, "us-west-1"));
	CHECK_OK(resolve("s3://bkt/p?profile=dev", &c, both));
	CHECK(!strcmp(c.access_key, "DEVAK"));
	/* keys from the config file; its plain endpoint_url */
	const char *cfgk[] = { cf, cr, home, "AWS_PROFILE=cfgkeys", NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, cfgk));
	CHECK(!strcmp(c.access_key, "CFGAK") && !strcmp(c.endpoint, "http://cfg.example:1"));
	CHECK(c.addressing == S3_ADDR_PATH);
	/* half the keys in each file: not credentials */
	const char *half[] = { cf, cr, home, "AWS_PROFILE=half", NULL };
	CHECK_RC(resolve("s3://bkt/p", &c, half), -CKPT_E_PERM);
	CHECK(strstr(ckpt_errmsg(), "profile 'half'") && strstr(ckpt_errmsg(), cred));
	const char *none[] = { cf, cr, home, "AWS_PROFILE=nobody", NULL };
	CHECK_RC(resolve("s3://bkt/p", &c, none), -CKPT_E_PERM);
	/* ~/.aws/ by default */
	char aws[4300];
	snprintf(aws, sizeof aws, "%s/.aws", dir);
	REQUIRE(mkdir(aws, 0755) == 0);
	snprintf(aws, sizeof aws, "%s/.aws/credentials", dir);
	write_file(aws, "[default]\naws_access_key_id=HOMEAK\naws_secret_access_key=HOMESK\n");
	const char *h[] = { home, NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, h));
	CHECK(!strcmp(c.access_key, "HOMEAK"));
}

/* A profile's credential_process (a script here), as the AWS CLI runs it: its JSON's keys, token
 * and expiration; after the credentials file, before the config's static keys; each failure a
 * clear -CKPT_E_PERM naming the profile and the program, never the command line's arguments nor
 * its directory (a token, a vault path: messages go to job logs), with the first line of the
 * process's standard error and nothing of the rest (which echoes the token here), neither in the
 * message nor on our standard error. */
static void test_process(void)
{
	char script[4300], cp[4300], cf[8400], cr[8400], text[20000];
	snprintf(script, sizeof script, "%s/creds.sh", dir);
	snprintf(cp, sizeof cp, "%s/config-proc", dir);
	snprintf(cf, sizeof cf, "AWS_CONFIG_FILE=%s", cp);
	snprintf(cr, sizeof cr, "AWS_SHARED_CREDENTIALS_FILE=%s/none", dir);
	/* MODE chooses what the script prints: one script, several profiles */
	write_file(script, "#!/bin/sh\ncase $1 in\n"
		   "ok) echo '{ \"Version\": 1, \"AccessKeyId\": \"PAK\", \"SecretAccessKey\": \"P\\/SK\",'"
		   " '\"SessionToken\": \"PTOK\", \"Expiration\": \"2030-01-02T03:04:05Z\" }' ;;\n"
		   "static) echo '{\"Version\":1,\"AccessKeyId\":\"SAK\",\"SecretAccessKey\":\"SSK\"}' ;;\n"
		   "offset) echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
		   "\"Expiration\":\"2030-01-02T05:04:05.123+02:00\"}' ;;\n"
		   "fail) echo 'no such role' >&2; echo \"with $2\" >&2; exit 3 ;;\n"
		   "nover) echo '{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}' ;;\n"
		   "nosecret) echo '{\"Version\": 1, \"AccessKeyId\": \"A\"}' ;;\n"
		   "badexp) echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
		   "\"Expiration\":\"tomorrow\"}' ;;\n"
		   "esac\n");
	REQUIRE(chmod(script, 0755) == 0);
	int n = 0;
	const char *modes[] = { "ok", "static", "offset", "fail", "nover", "nosecret", "badexp" };
	for (size_t i = 0; i < ARRAY_SIZE(modes); i++)
		n += snprintf(text + n, sizeof text - (size_t)n, "[profile %s]\ncredential_process = %s %s "
			      "--token=SeCrEtToK\naws_access_key_id = CFGAK\naws_secret_access_key = "
			      "CFGSK\n", modes[i], script, modes[i]);
	write_file(cp, text);
	struct s3_conf c;
	char prof[64];
	const char *env[] = { cf, cr, home, prof, NULL };
	snprintf(prof, sizeof prof, "AWS_PROFILE=ok");
	CHECK_OK(resolve("s3://bkt/p", &c, env));
	CHECK(!strcmp(c.access_key, "PAK") && !strcmp(c.secret_key, "P/SK") && !strcmp(c.token, "PTOK"));
	CHECK(c.expires == 1893553445); /* 2030-01-02T03:04:05Z */
	snprintf(prof, sizeof prof, "AWS_PROFILE=static");
	CHECK_OK(resolve("s3://bkt/p", &c, env));
	CHECK(!strcmp(c.access_key, "SAK") && !c.token[0] && c.expires == 0);
	snprintf(prof, sizeof prof, "AWS_PROFILE=offset");
	CHECK_OK(resolve("s3://bkt/p", &c, env));
	CHECK(c.expires == 1893553445);
	const char *want[][2] = { { "fail", "exit status 3: no such role" }, { "nover", "Version" },
				  { "nosecret", "SecretAccessKey" }, { "badexp", "Expiration" } };
	char errpath[4300];
	snprintf(errpath, sizeof errpath, "%s/stderr", dir);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		snprintf(prof, sizeof prof, "AWS_PROFILE=%s", want[i][0]);
		/* our standard error into a file while the process runs */
		fflush(stderr);
		int saved = dup(2), efd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		REQUIRE(saved >= 0 && efd >= 0 && dup2(efd, 2) == 2);
		int rc = resolve("s3://bkt/p", &c, env);
		REQUIRE(dup2(saved, 2) == 2);
		close(saved);
		close(efd);
		CHECK_RC(rc, -CKPT_E_PERM);
		const char *m = ckpt_errmsg();
		printf("  %s: %s\n", want[i][0], m);
		CHECK(strstr(m, want[i][1]) && strstr(m, "credential_process"));
		CHECK(strstr(m, want[i][0]) && strstr(m, "(creds.sh)"));
		CHECK(!strstr(m, "SeCrEtToK") && !strstr(m, dir)); /* the argument, the directory */
		struct stat est;
		CHECK(stat(errpath, &est) == 0 && est.st_size == 0); /* nothing reached our stderr */
	}
	/* the credentials file's keys come first; the environment's before both */
	snprintf(cr, sizeof cr, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	write_file(cred, "[ok]\naws_access_key_id = FILEAK\naws_secret_access_key = FILESK\n");
	snprintf(prof, sizeof prof, "AWS_PROFILE=ok");
	CHECK_OK(resolve("s3://bkt/p", &c, env));
	CHECK(!strcmp(c.access_key, "FILEAK") && !c.cred_process[0]);
	const char *envk[] = { cf, cr, home, prof, "AWS_ACCESS_KEY_ID=EAK", "AWS_SECRET_ACCESS_KEY=ESK",
			       NULL };
	CHECK_OK(resolve("s3://bkt/p", &c, envk));
	CHECK(!strcmp(c.access_key, "EAK"));
}

static void test_errors(void)
{
	struct s3_conf c;
	const char *env[] = { "AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK", home, NULL };
	const char *bad[] = { "s3:/bkt", "file:///x", "s3://", "s3:///p", "s3://b@d/p",
			      "s3://bkt/p?x=1", "s3://bkt/p?page=0", "s3://bkt/p?page=1001",
			      "s3://bkt/p?noreplace=maybe", "s3://bkt/p?addressing=side",
			      "s3://bkt/p?endpoint=ftp://x", "s3://bkt/p?endpoint=http://",
			      "s3://bkt/p?region=EU_1", "s3://bkt/a\nb", "s3://bkt/p?page" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int rc = resolve(bad[i], &c, env);
		if (rc != -CKPT_E_INVAL)
			fprintf(stderr, "'%s' gave %d (%s)\n", bad[i], rc, ckpt_errmsg());
		CHECK(rc == -CKPT_E_INVAL && ckpt_errmsg()[0]);
	}
	/* an over-long line in a profile file is refused naming the file and the line */
	char cr[4300], *line = malloc(6000);
	memset(line, 'x', 5999);
	line[5999] = 0;
	FILE *f = fopen(cred, "w");
	REQUIRE(f && line);
	fprintf(f, "[default]\naws_access_key_id = %s\n", line);
	fclose(f);
	snprintf(cr, sizeof cr, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
	const char *lg[] = { cr, home, NULL };
	CHECK_RC(resolve("s3://bkt/p", &c, lg), -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), cred) && strstr(ckpt_errmsg(), "line 2"));
	free(line);
}

int main(void)
{
	char *d = t_tmpdir("s3conf");
	snprintf(dir, sizeof dir, "%s", d);
	snprintf(cred, sizeof cred, "%s/credentials", dir);
	snprintf(conf, sizeof conf, "%s/config", dir);
	snprintf(home, sizeof home, "HOME=%s", dir);
	test_env_only();
	test_profiles();
	test_process();
	test_errors();
	t_rmrf(d);
	free(d);
	return t_done();
}
