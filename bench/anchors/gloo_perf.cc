/*
 * gloo_perf.cc -- the Gloo anchor of bench/compare: times Gloo's
 * collectives over its TCP transport on loopback, with the sizes, data,
 * timing and CSV columns of xcoll-perf and mpi_perf (perf_common.h).
 *
 *   RANK=r WORLD_SIZE=n GLOO_STORE_DIR=/tmp/dir gloo_perf -C allreduce ...
 *
 * bench/compare starts the n processes itself; they meet through a Gloo
 * FileStore in GLOO_STORE_DIR (a fresh, empty directory per run, so that no
 * key of an earlier run is seen).  Rank 0 prints the CSV.
 *
 * What runs, for the Debian build of Gloo (2022 snapshot):
 *   allreduce      gloo::allreduce, default algorithm (ring), out of place
 *   reducescatter  gloo::ReduceScatterHalvingDoubling (the only reduce-
 *                  scatter Gloo has; in place, reported inplace=1)
 *   allgather      gloo::allgather
 *   broadcast      gloo::broadcast, root 0
 *   reduce         gloo::reduce, root 0
 *   alltoall       gloo::alltoall
 *   sendrecv       UnboundBuffer send to rank+1, recv from rank-1
 * Method, per size, as xcoll-perf (perf_common.h): warm up; one
 * gloo::barrier; `iters` calls each timed on its own; the times reduced with
 * max over ranks; one more call on fresh inputs, checked, the wrong counts
 * summed over ranks.
 */
#include "perf_common.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

using Ctx = std::shared_ptr<gloo::Context>;
using ReduceFn = void (*)(void *, const void *, const void *, size_t);

const ReduceFn kSumF32 = &gloo::sum<float>;
const ReduceFn kMaxF64 = &gloo::max<double>;
const ReduceFn kSumF64 = &gloo::sum<double>;

double now_s()
{
    using clk = std::chrono::steady_clock;
    return std::chrono::duration<double>(clk::now().time_since_epoch())
        .count();
}

void barrier(const Ctx &ctx)
{
    gloo::BarrierOptions o(ctx);
    o.setTag(1);
    gloo::barrier(o);
}

/* In-place elementwise reduction of a double array over all ranks. */
void allreduce_f64(const Ctx &ctx, double *v, size_t n, ReduceFn fn)
{
    gloo::AllreduceOptions o(ctx);
    o.setOutput(v, n);
    o.setReduceFunction(fn);
    o.setTag(2);
    gloo::allreduce(o);
}

/* One collective at one size, its buffers and option objects built once. */
class Op {
  public:
    Op(const Ctx &ctx, int coll, const perf_layout_t &l, float *send,
       float *recv)
        : ctx_(ctx), coll_(coll), l_(l), send_(send), recv_(recv)
    {
        int r = ctx->rank, n = ctx->size;
        switch (coll) {
        case PERF_REDUCESCATTER: {
            std::vector<int> elems(n, (int)l.block);
            std::vector<float *> ptrs(1, send);
            rs_.reset(new gloo::ReduceScatterHalvingDoubling<float>(
                ctx, ptrs, (int)l.sendc, elems));
            break;
        }
        case PERF_SENDRECV:
            sbuf_ = ctx->createUnboundBuffer(send, l.block * sizeof(float));
            rbuf_ = ctx->createUnboundBuffer(recv, l.block * sizeof(float));
            slot_ = ctx->nextSlot();
            to_ = (r + 1) % n;
            from_ = (r + n - 1) % n;
            break;
        default:
            break;
        }
    }

    void run()
    {
        const uint32_t tag = 10;
        switch (coll_) {
        case PERF_ALLREDUCE: {
            gloo::AllreduceOptions o(ctx_);
            o.setInput(send_, l_.block);
            o.setOutput(recv_, l_.block);
            o.setReduceFunction(kSumF32);
            o.setTag(tag);
            gloo::allreduce(o);
            break;
        }
        case PERF_REDUCESCATTER:
            rs_->run();
            break;
        case PERF_ALLGATHER: {
            gloo::AllgatherOptions o(ctx_);
            o.setInput(send_, l_.sendc);
            o.setOutput(recv_, l_.recvc);
            o.setTag(tag);
            gloo::allgather(o);
            break;
        }
        case PERF_BROADCAST: {
            gloo::BroadcastOptions o(ctx_);
            o.setOutput(send_, l_.block);
            o.setRoot(0);
            o.setTag(tag);
            gloo::broadcast(o);
            break;
        }
        case PERF_REDUCE: {
            gloo::ReduceOptions o(ctx_);
            o.setInput(send_, l_.block);
            o.setOutput(recv_, l_.block);
            o.setRoot(0);
            o.setReduceFunction(kSumF32);
            o.setTag(tag);
            gloo::reduce(o);
            break;
        }
        case PERF_ALLTOALL: {
            gloo::AlltoallOptions o(ctx_);
            o.setInput(send_, l_.sendc);
            o.setOutput(recv_, l_.recvc);
            o.setTag(tag);
            gloo::alltoall(o);
            break;
        }
        case PERF_SENDRECV:
            rbuf_->recv(from_, slot_);
            sbuf_->send(to_, slot_);
            rbuf_->waitRecv();
            sbuf_->waitSend();
            break;
        default:
            break;
        }
    }

    /* Move this rank's result to where perf_check looks: Gloo's
     * reduce-scatter works in place and leaves this rank's slice at the
     * start of the buffer. */
    void collect_result()
    {
        if (coll_ == PERF_REDUCESCATTER)
            std::memcpy(recv_, send_, l_.block * sizeof(float));
    }

  private:
    // Option objects of the gloo:: functions are rebuilt per call (cheap:
    // they wrap the pointers in unbound buffers), as torch.distributed's
    // Gloo backend does; the reduce-scatter object and the send/recv
    // buffers are built once.
    Ctx ctx_;
    int coll_;
    perf_layout_t l_;
    float *send_, *recv_;
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_;
    std::unique_ptr<gloo::transport::UnboundBuffer> sbuf_, rbuf_;
    uint64_t slot_ = 0;
    int to_ = 0, from_ = 0;
};

int bench_size(const Ctx &ctx, const perf_opts_t &o, const perf_layout_t &l,
               std::vector<double> &t)
{
    int r = ctx->rank, n = ctx->size;
    // perf_alloc: page-aligned, or huge pages with --huge (as xcoll-perf
    // --buffers xcoll); `off` bytes past the boundary (--offset)
    struct Buf {
        float *p;
        size_t bytes;
        int huge;
        size_t off;
        Buf(size_t n, int h, size_t o)
            : p((float *)perf_alloc(n * sizeof(float), h, o)), bytes(n * sizeof(float)), huge(h), off(o)
        {
            if (!p)
                throw std::bad_alloc();
            memset(p, 0, bytes);
        }
        ~Buf() { perf_free(p, bytes, huge, off); }
        float *data() { return p; }
    } send(l.sendc, o.huge, 0), recv(l.recvc, o.huge, o.offset);
    Op op(ctx, o.coll, l, send.data(), recv.data());

    perf_fill(o.coll, &l, r, send.data(), recv.data());
    for (int i = 0; i < o.warmup; i++) {
        if (o.fresh) {
            perf_touch(o.coll, &l, r, send.data());
            barrier(ctx);
        }
        op.run();
    }
    barrier(ctx);
    for (int i = 0; i < o.iters; i++) {
        if (o.fresh) {
            perf_touch(o.coll, &l, r, send.data());
            barrier(ctx);
        }
        double t0 = now_s();
        op.run();
        t[i] = now_s() - t0;
    }
    double mean = perf_mean(t.data(), o.iters);
    allreduce_f64(ctx, &mean, 1, kMaxF64);
    allreduce_f64(ctx, t.data(), (size_t)o.iters, kMaxF64);

    double bad = -1;
    if (o.check) {
        perf_fill(o.coll, &l, r, send.data(), recv.data());
        op.run();
        op.collect_result();
        bad = (double)perf_check(o.coll, &l, r, n, send.data(), recv.data());
        allreduce_f64(ctx, &bad, 1, kSumF64);
    }
    if (r == 0) {
        const char *algo = o.coll == PERF_ALLREDUCE        ? "ring"
                           : o.coll == PERF_REDUCESCATTER ? "halving_doubling"
                                                          : "default";
        perf_print_row(o.coll, &l, algo, t.data(), o.iters, (long long)bad,
                       n, o.coll == PERF_REDUCESCATTER ||
                              o.coll == PERF_BROADCAST,
                       mean);
    }
    return 0;
}

int env_int(const char *a, const char *b)
{
    const char *v = std::getenv(a);
    if (!v)
        v = std::getenv(b);
    return v ? std::atoi(v) : -1;
}

} // namespace

int main(int argc, char **argv)
{
    perf_opts_t o;
    if (perf_parse_args(argc, argv, &o) != 0)
        return 2;
    int rank = env_int("RANK", "GLOO_RANK");
    int size = env_int("WORLD_SIZE", "GLOO_SIZE");
    const char *dir = std::getenv("GLOO_STORE_DIR");
    if (rank < 0 || size < 1 || rank >= size || !dir) {
        std::fprintf(stderr, "gloo_perf: set RANK, WORLD_SIZE and "
                             "GLOO_STORE_DIR (an empty shared directory)\n");
        return 2;
    }
    try {
        gloo::transport::tcp::attr attr("127.0.0.1");
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        ctx->setTimeout(std::chrono::seconds(300));
        ctx->connectFullMesh(store, dev);

        if (rank == 0)
            std::printf("%s\n", PERF_CSV_HEADER);
        std::vector<double> t((size_t)o.iters);
        size_t last = 0;
        for (size_t s = o.min_bytes; s <= o.max_bytes; s *= o.factor) {
            perf_layout_t l = perf_layout_of(o.coll, s, size);
            if (l.bytes == 0 || l.bytes == last)
                continue;
            last = l.bytes;
            bench_size(ctx, o, l, t);
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "gloo_perf: rank %d: %s\n", rank, e.what());
        return 1;
    }
    return 0;
}
