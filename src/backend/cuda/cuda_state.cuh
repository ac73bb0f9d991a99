#pragma once
// Per-sequence work of the recurrent ops (conv, ssm, delta): each sequence's rows and where its
// layer state is read, written and kept. Kernels take one job per block row, so a sequence's
// arithmetic never depends on the other sequences of the round.
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace tf::cuda {

struct SeqJob {
  int64_t src = 0, dst = 0;      // float offsets of the layer's state in the pool (off included)
  int32_t row0 = 0, n = 0;       // first row and row count
  int32_t keep0 = 0, nkeep = 0;  // first entry in the keep offsets and their count
};

struct SeqJobs {
  std::vector<SeqJob> step, chunked;  // by step[s]; ops without forms put all in chunked
  std::vector<int64_t> keep;          // float offsets into keep_pool (off included)
};

// Checks the layout and state refs for an op whose layer state is `floats` floats at `off` of
// each slot over m rows; has_forms: step/chunked split (keep only with step), else all in chunked.
SeqJobs plan_seqs(const RowLayout& rows, const StateRefs& st, int64_t off, int64_t floats,
                  int64_t m, const char* op, bool has_forms);

struct DevJobs {
  const SeqJob* step = nullptr;
  const SeqJob* chunked = nullptr;
  const int64_t* keep = nullptr;
};

// Copies the jobs to the device through the backend's metadata ring (valid for the op's kernels).
DevJobs upload_jobs(CudaBackend& be, const SeqJobs& j);

// A 1-row weight of n entries as f32 on the device (null for a null w); names op and what.
const float* vec_f32(const Weight* w, int64_t n, const char* op, const char* what);
// Checks that c holds width columns of m rows.
void check_cols(const Cols& c, int64_t m, int64_t width, const char* op, const char* what);

// Largest dynamic shared memory one block may use on the current device.
int max_smem_optin();

}  // namespace tf::cuda
