// torch_cpp_proto.cpp -- a minimal C++ c10d ProcessGroup over xcoll, built
// only by bench/torch_overhead.py to measure what a C++ extension would
// save over the Python ProcessGroup (python/xcoll/torch.py).  Not shipped:
// all-reduce and barrier only, no futures.  Two groups:
//   XcollCppPG  -- xc_iallreduce, Work::wait = xc_request_wait
//   NullCppPG   -- returns a completed Work without communicating (the
//                  dispatch cost of a C++ group, the floor for any backend)
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <xcoll.h>

namespace {

xc_dtype_t to_xc(at::ScalarType t)
{
    switch (t) {
    case at::kFloat: return XC_FLOAT32;
    case at::kDouble: return XC_FLOAT64;
    case at::kLong: return XC_INT64;
    case at::kInt: return XC_INT32;
    default: TORCH_CHECK(false, "proto: dtype not handled");
    }
}

class XWork : public c10d::Work {
  public:
    XWork(xc_request_t *req, std::vector<at::Tensor> keep)
        : req_(req), keep_(std::move(keep)) {}
    ~XWork() override { xc_request_free(req_); }
    bool isCompleted() override
    {
        int done = 0;
        xc_request_test(req_, &done);
        return done;
    }
    bool wait(std::chrono::milliseconds) override
    {
        // torch's binding of Work.wait already released the GIL.
        xc_result_t rc = xc_request_wait(req_);
        TORCH_CHECK(rc == XC_OK, xc_err_name(rc), ": ", xc_last_error());
        return true;
    }

  private:
    xc_request_t *req_;
    std::vector<at::Tensor> keep_;
};

class DoneWork : public c10d::Work {
  public:
    bool isCompleted() override { return true; }
    bool wait(std::chrono::milliseconds) override { return true; }
};

class XcollCppPG : public c10d::ProcessGroup {
  public:
    XcollCppPG(int rank, int size, int64_t comm)
        : ProcessGroup(rank, size), comm_(reinterpret_cast<xc_comm_t *>(comm)) {}
    const std::string getBackendName() const override { return "xcpp"; }
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &t,
                                             const c10d::AllreduceOptions &) override
    {
        auto &x = t[0];
        xc_request_t *req;
        xc_result_t rc = xc_iallreduce(x.data_ptr(), x.data_ptr(), x.numel(),
                                       to_xc(x.scalar_type()), XC_SUM, comm_, &req);
        TORCH_CHECK(rc == XC_OK, xc_err_name(rc), ": ", xc_last_error());
        return c10::make_intrusive<XWork>(req, t);
    }
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        xc_request_t *req;
        xc_result_t rc = xc_ibarrier(comm_, &req);
        TORCH_CHECK(rc == XC_OK, xc_err_name(rc), ": ", xc_last_error());
        return c10::make_intrusive<XWork>(req, std::vector<at::Tensor>());
    }

  private:
    xc_comm_t *comm_;
};

class NullCppPG : public c10d::ProcessGroup {
  public:
    NullCppPG(int rank, int size) : ProcessGroup(rank, size) {}
    const std::string getBackendName() const override { return "nullcpp"; }
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &,
                                             const c10d::AllreduceOptions &) override
    {
        return c10::make_intrusive<DoneWork>();
    }
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        return c10::make_intrusive<DoneWork>();
    }
};

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    py::class_<XcollCppPG, c10d::ProcessGroup, c10::intrusive_ptr<XcollCppPG>>(m, "XcollCppPG")
        .def(py::init<int, int, int64_t>());
    py::class_<NullCppPG, c10d::ProcessGroup, c10::intrusive_ptr<NullCppPG>>(m, "NullCppPG")
        .def(py::init<int, int>());
}
