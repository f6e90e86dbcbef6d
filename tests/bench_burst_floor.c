/* bench_burst_floor: what the broker alone needs for a burst. N runs (default
 * 50,000) due at one instant go through one per-second classic delay queue
 * (expiration = due - now) into the quorum ready queue, consumed by C
 * consumer processes (default 2, prefetch 256 each) that acknowledge at once,
 * without PostgreSQL. Prints one JSON line: when the last message reached a
 * consumer, after its due time. This is the floor under bench_worker's burst,
 * which adds a claim and a completion per run.
 *
 *   eval "$(tests/servers.sh start)"
 *   build/tests/bench_burst_floor [N] [CONSUMERS] [PREFETCH] [multiple|single] [LEAD_MS]
 *
 * "multiple" (default) acknowledges with warren_broker_ack_later/_flush as
 * the worker does; "single" sends one basic.ack per message. LEAD_MS
 * (default 0) releases the runs that long before due, as
 * planner.release_lead does, and then the consumers hold what they get until
 * the due time before acknowledging it, as the worker's claim waits: with
 * `10000 2 100 multiple 3000` it is the broker's floor under the issue-17
 * burst (2 workers x 50 slots, prefetch 2 x concurrency, lead 3 s). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>

#include "testenv.h"

/* CPU seconds every beam.smp (RabbitMQ) on this machine has used so far. */
static double broker_cpu_s(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    double s = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[300], buf[1024];
        unsigned long long ut, st;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *close = strrchr(buf, ')');
        if (strstr(buf, "(beam.smp)") == NULL || close == NULL ||
            sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) !=
                2)
            continue;
        s += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    if (d != NULL)
        closedir(d);
    return s;
}

/* A consumer: acknowledges everything, nothing before `hold_until` (wall
 * clock, ms; 0: at once); stops 3 s after the last message. */
static void consume(const char *url, int prefetch, int multiple, int64_t hold_until, int fd)
{
    warren_broker *b = NULL;
    warren_error err = {0};
    long n = 0;
    int64_t first = 0, last = 0;
    if (warren_broker_open(url, NULL, &b, &err) != 0 || warren_broker_qos(b, prefetch, &err) != 0 ||
        warren_broker_consume(b, "warren.ready.bench", &err) != 0)
        testenv_die("consumer", err.message);
    for (;;) {
        warren_delivery d;
        int got = 0;
        /* flush the acknowledgements when nothing more is buffered: as the
         * worker's loop does */
        if (multiple) {
            if (warren_broker_next(b, 0, &d, &got, &err) != 0)
                testenv_die("next", err.message);
            if (!got && warren_broker_ack_flush(b, &err) != 0)
                testenv_die("flush", err.message);
        }
        if (!got && warren_broker_next(b, n > 0 ? 3000 : 60000, &d, &got, &err) != 0)
            testenv_die("next", err.message);
        if (!got)
            break;
        last = testenv_wall_ms();
        if (first == 0)
            first = last;
        n++;
        if (last < hold_until) {
            /* every run is due at the same instant: hold until then, as the
             * worker's claim waits for the due time */
            struct timespec ts = {(time_t)((hold_until - last) / 1000),
                                  (long)((hold_until - last) % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if ((multiple ? warren_broker_ack_later(b, d.tag, &err)
                      : warren_broker_ack(b, d.tag, &err)) != 0)
            testenv_die("ack", err.message);
        warren_delivery_clear(&d);
    }
    char line[128];
    int len = snprintf(line, sizeof(line), "%ld %lld %lld\n", n, (long long)first, (long long)last);
    if (write(fd, line, (size_t)len) != len)
        testenv_die("write", NULL);
    warren_broker_free(b);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 50000;
    int nc = argc > 2 ? atoi(argv[2]) : 2;
    int prefetch = argc > 3 ? atoi(argv[3]) : 256;
    int multiple = !(argc > 4 && strcmp(argv[4], "single") == 0);
    long lead = argc > 5 ? atol(argv[5]) : 0;
    static const char *const queues[] = {"bench"};
    warren_error err = {0};
    warren_broker *b = NULL;
    char *url = testenv_vhost();
    int pfd[2];

    if (nc < 1 || nc > 16 || n < 1 || lead < 0 || lead > 60000 || pipe(pfd) != 0)
        return 2;
    if (warren_broker_open(url, NULL, &b, &err) != 0 ||
        warren_broker_topology(b, queues, 1, 5, &err) != 0 ||
        warren_broker_confirm_select(b, &err) != 0)
        testenv_die("topology", err.message);
    int64_t due = (testenv_wall_ms() / 1000 + 2 + n / 4000) * 1000 + 1000 + lead;
    for (int i = 0; i < nc; i++)
        if (fork() == 0) {
            close(pfd[0]);
            consume(url, prefetch, multiple, lead > 0 ? due : 0, pfd[1]);
            _exit(0);
        }
    close(pfd[1]);

    warren_header h[5] = {{WARREN_QUEUE_HEADER, "bench"},
                          {"x-warren-job", "bench"},
                          {"x-warren-scheduled-at", "2026-11-29T14:00:00Z"},
                          {"x-warren-due-at", "2026-11-29T14:00:00.000Z"},
                          {"x-warren-attempt", "0"}};
    char body[301], id[64], qname[128];
    warren_message m = {0};
    uint64_t seq = 0;
    memset(body, 'x', 300);
    body[0] = '{';
    body[299] = '}';
    body[300] = '\0';
    m.routing_key = qname;
    m.exchange = "";
    m.type = "bench";
    m.headers = h;
    m.nheaders = 5;
    m.body = body;
    m.body_len = 300;
    m.mandatory = 1;
    m.message_id = id;
    if (warren_broker_delay_queue(b, (due - lead) / 1000, 600000, qname, sizeof(qname), &err) != 0)
        testenv_die("delay_queue", err.message);
    for (long i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "bench@%ld", i);
        m.expiration_ms = due - lead - testenv_wall_ms();
        if (m.expiration_ms < 1)
            m.expiration_ms = 1;
        if (warren_broker_publish(b, &m, &seq, &err) != 0)
            testenv_die("publish", err.message);
        if (seq >= 256 && warren_broker_confirm_wait(b, seq - 255, 30000, NULL, NULL, &err) != 0)
            testenv_die("confirm_wait", err.message);
    }
    if (warren_broker_confirm_wait(b, seq, 30000, NULL, NULL, &err) != 0)
        testenv_die("confirm_wait", err.message);
    int64_t published = testenv_wall_ms();
    /* the broker's CPU from the due time until the consumers stop (3 s idle
     * after the last delivery): with a lead, what the drain costs it */
    double cpu_pub = broker_cpu_s();
    if (published < due) {
        struct timespec ts = {(time_t)((due - published) / 1000),
                              (long)((due - published) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    double cpu_due = broker_cpu_s();
    long total = 0;
    int64_t first = 0, last = 0;
    FILE *f = fdopen(pfd[0], "r");
    for (int i = 0; i < nc; i++) {
        long cn;
        long long cf, cl;
        if (fscanf(f, "%ld %lld %lld", &cn, &cf, &cl) != 3)
            break;
        total += cn;
        if (cn > 0 && (first == 0 || cf < first))
            first = cf;
        if (cl > last)
            last = cl;
    }
    while (wait(NULL) > 0)
        ;
    double cpu_end = broker_cpu_s();
    char la[128] = "";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf != NULL) {
        if (fgets(la, sizeof(la), lf) == NULL)
            la[0] = '\0';
        la[strcspn(la, "\n")] = '\0';
        fclose(lf);
    }
    printf("{\"bench\":\"broker_burst_floor\",\"runs\":%ld,\"consumers\":%d,\"prefetch\":%d,"
           "\"acks\":\"%s\",\"lead_ms\":%ld,\"published_before_due_ms\":%lld,\"first_after_due_"
           "ms\":%lld,"
           "\"all_delivered_after_due_ms\":%lld,\"delivered\":%ld,\"broker_cpu_s\":{\"until_due\":%"
           ".2f,"
           "\"after_due\":%.2f},\"loadavg\":\"%s\"}\n",
           n, nc, prefetch, multiple ? "multiple" : "single", lead, (long long)(due - published),
           (long long)(first - due), (long long)(last - due), total, cpu_due - cpu_pub,
           cpu_end - cpu_due, la);
    warren_broker_free(b);
    free(url);
    return total == n ? 0 : 1;
}
