/* The floor under fan-out: what one 100-byte send() to each of N connected loopback TCP
 * sockets costs the sending process on this machine, with a reader process draining every
 * socket through epoll (as the self-test's generator does). wstune's broadcast cannot cost
 * less per recipient than this: it is the write itself, including the receiving socket's
 * softirq work, which loopback runs in the sender's context.
 *
 *   cc -O2 -o /tmp/write-floor bench/write-floor.c
 *   taskset -c 0 /tmp/write-floor [CONNS=10000] [ROUNDS=20] [BYTES=100] [READER_CPU=1] [GAP_MS=100]
 *
 * Prints the writer's CPU (utime+stime, getrusage) per send over all rounds, and the wall
 * time of a round until the reader has every byte (p50 and max). Rounds are GAP_MS apart so
 * the reader sleeps in epoll_wait between them, like the generator between broadcasts. The gap
 * matters: a socket that received nothing for longer than its RTO (200 ms minimum) ACKs the
 * next segment at once (quick-ack mode), and on loopback that ACK is made and processed in the
 * sender's context, so rounds 1 s apart cost the sender more per send than rounds 100 ms apart.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The reader: connect CONNS sockets, then drain them with epoll; after each round's
 * CONNS*BYTES bytes, one byte on the pipe tells the writer the round arrived. */
static void reader(int port, int conns, int bytes, int rounds, int ack) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ep = epoll_create1(0);
    for (int i = 0; i < conns; i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (s < 0) die("socket");
        if (connect(s, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
            die("connect");
        struct epoll_event e = {.events = EPOLLIN, .data.fd = s};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) < 0) die("epoll_ctl");
    }
    long want = (long)conns * bytes, got = 0;
    double c0 = cpu_s();
    struct epoll_event ev[1024];
    char buf[65536];
    for (int r = 0; r < rounds;) {
        int n = epoll_wait(ep, ev, 1024, 10000);
        if (n <= 0) die("reader: epoll_wait timed out");
        for (int i = 0; i < n; i++) {
            ssize_t k;
            while ((k = read(ev[i].data.fd, buf, sizeof buf)) > 0) got += k;
        }
        while (got >= want && r < rounds) {
            got -= want;
            r++;
            if (write(ack, "x", 1) != 1) die("ack");
        }
    }
    /* The receive side's floor, for the generator's figure (epoll + one read per socket). */
    printf("write-floor: reader CPU %.2f us per receive\n",
           (cpu_s() - c0) / ((double)conns * rounds) * 1e6);
    fflush(stdout);
    exit(0);
}

int main(int argc, char **argv) {
    int conns = argc > 1 ? atoi(argv[1]) : 10000;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    int bytes = argc > 3 ? atoi(argv[3]) : 100;
    int reader_cpu = argc > 4 ? atoi(argv[4]) : 1;
    int gap_ms = argc > 5 ? atoi(argv[5]) : 100;
    if (conns < 1 || rounds < 1 || bytes < 1 || bytes > 65536 || gap_ms < 0) {
        fprintf(stderr, "usage: write-floor [CONNS>=1] [ROUNDS>=1] [BYTES 1..65536] [READER_CPU] [GAP_MS>=0]\n");
        return 3;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (listen(l, 4096) < 0) die("listen");
    socklen_t al = sizeof a;
    getsockname(l, (struct sockaddr *)&a, &al);
    int p[2];
    if (pipe(p) < 0) die("pipe");
    pid_t child = fork();
    if (child == 0) {
        close(p[0]);
        if (reader_cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(reader_cpu, &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        reader(ntohs(a.sin_port), conns, bytes, rounds, p[1]);
    }
    close(p[1]);
    int *fd = malloc(sizeof(int) * conns);
    for (int i = 0; i < conns; i++) {
        fd[i] = accept4(l, NULL, NULL, SOCK_NONBLOCK);
        if (fd[i] < 0) die("accept");
        /* As wstune's connections: Nagle off. */
        setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    char *msg = malloc(bytes);
    memset(msg, 'x', bytes);
    double *wall = malloc(sizeof(double) * rounds), cpu = 0;
    long short_writes = 0;
    for (int r = 0; r < rounds; r++) {
        usleep(gap_ms * 1000);
        double c0 = cpu_s(), t0 = now_s();
        for (int i = 0; i < conns; i++) {
            ssize_t k = send(fd[i], msg, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k != bytes) short_writes++;
        }
        double c1 = cpu_s();
        char x;
        if (read(p[0], &x, 1) != 1) die("reader died");
        wall[r] = now_s() - t0;
        cpu += c1 - c0;
    }
    qsort(wall, rounds, sizeof(double), cmp);
    printf("write-floor: %d sockets x %d rounds x %d B, %d ms apart: writer CPU %.2f us per send "
           "(%.3f CPU-s for %ld sends), round until the reader has all: p50 %.1f ms, max %.1f ms, "
           "short writes %ld\n",
           conns, rounds, bytes, gap_ms, cpu / ((double)conns * rounds) * 1e6, cpu,
           (long)conns * rounds, wall[rounds / 2] * 1e3, wall[rounds - 1] * 1e3, short_writes);
    waitpid(child, NULL, 0);
    return short_writes ? 1 : 0;
}
