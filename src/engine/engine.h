#pragma once
// The engine runs rounds over lanes: it admits requests from a queue into lanes, plans each
// round, runs the model on it and samples each lane's next token. Thread-safe submit and
// cancel; step() runs on one thread (the CLI's or the server's engine thread).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/page_pool.h"
#include "engine/prefix_store.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/state_pool.h"
#include "models/model.h"

namespace tf {

// The queue is at its bound: the caller should retry later (HTTP 429).
class QueueFull : public Error {
 public:
  using Error::Error;
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  uint64_t request = 0;
  int32_t token = -1;           // -1 on a finish-only event
  float logprob = 0;            // of token, when logprobs were asked
  std::vector<TokenLogprob> top;
  FinishReason finish = FinishReason::None;
  std::string error;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int completion_tokens = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends after any of these (not included in output)
  int logprobs = -1;              // -1 off; 0 chosen token only; n also the n most likely
  std::string cache_salt;         // prompt-cache tenant: no page is shared across salts
  // Called on the engine thread for every sampled token and once with a finish reason.
  std::function<void(const TokenEvent&)> on_event;
  // Optional: logits of every row this request computes, prompt rows included (the row at
  // position p predicts token p + 1); engine thread.
  std::function<void(int pos, const float* logits)> on_logits;
  // Every prompt row must be computed (no prompt-cache reuse): perplexity, echo with logprobs.
  bool all_prompt_rows = false;
};

struct EngineOptions {
  int lanes = 1;
  int context = 0;      // per-lane window; 0 = the model's
  int page_size = 16;
  int chunk = 256;      // prefill chunk grid; a multiple of page_size
  // Prefill tokens one round may add beside the lanes' decode rows, in whole chunks of several
  // lanes' prompts; 0: one chunk. At least the chunk when set.
  int round_tokens = 0;
  int max_queue = 1024;
  int cache_pages = 0;  // pool pages beyond the lanes' own, for kept prompt prefixes; 0: no cache
  uint64_t host_cache_bytes = 0;  // second tier in host memory for evicted prefixes
  uint64_t seed = 0;    // prefix hash seed; 0: a random one
  // Host bytes of recurrent-state snapshots the prompt cache may keep (models with recurrent
  // layers); 0: one snapshot per chunk of cache pages.
  uint64_t state_cache_bytes = 0;
};

// Pages and where they are: free + kept + used == total whenever the engine is between rounds.
struct Census {
  int free = 0, kept = 0, used = 0, total = 0;
  bool ok() const { return free + kept + used == total && free >= 0 && kept >= 0 && used >= 0; }
};

struct EngineStats {
  int lanes = 0, lanes_busy = 0, queued = 0;
  int pages_total = 0, pages_free = 0, pages_used = 0, pages_kept = 0, page_size = 0;
  int lane_pages = 0;  // pages reserved for the lanes' own windows
  uint64_t kv_bytes = 0, scratch_rows = 0;
  uint64_t rounds = 0, prompt_tokens = 0, generated_tokens = 0;
  // Engine-thread seconds in rounds: all of each, its model forward (device work and the wait
  // for its draws), and handing the drawn tokens to their requests (streams, stop checks); the
  // part before the forward (admission, the plan, the round's input), and the part of the
  // forward the host spent blocked on the device (0 on the cpu).
  double round_seconds = 0, forward_seconds = 0, emit_seconds = 0, prepare_seconds = 0, forward_wait_seconds = 0;
  // The same for the rounds whose rows all decode (no prefill chunk), the steady state of a load.
  uint64_t decode_rounds = 0;
  double decode_round_seconds = 0, decode_forward_seconds = 0, decode_prepare_seconds = 0,
         decode_forward_wait_seconds = 0;
  int state_slots = 0, state_slots_used = 0;  // recurrent state pool (0 for attention-only models)
  uint64_t state_bytes = 0;                   // one slot
  PrefixStats cache;
};

// The most rows one round holds: a decode row a lane plus the prefill budget (round_tokens, at
// least a chunk, no more than a chunk a lane); context 0 is taken as unbounded.
int max_round_rows(int lanes, int chunk, int context, int round_tokens);

// The prefill budget a round gets unless asked: on a GPU, where wider rounds run the matmuls
// better and a burst of prompts starts decoding together, 4,096 tokens; on the CPU one chunk.
int default_round_tokens(bool gpu, int chunk);

class Engine {
 public:
  Engine(Model& model, Backend& backend, const EngineOptions& opt);
  ~Engine();

  // Queues a request; throws tf::Error when the queue is full or the request can never fit.
  uint64_t submit(GenerationRequest req);
  // Siblings of one prompt (n > 1): one lane prefills it, the others share its pages and its last
  // row's logits, each drawing with its own sampling settings.
  std::vector<uint64_t> submit_group(std::vector<GenerationRequest> reqs, bool reserved = false);
  // Holds n queue places for submits that follow (reserved = true), so a caller can refuse a
  // request before it answers anything; false when the queue cannot take n more.
  bool try_reserve(int n);
  void release_reservation(int n);
  void cancel(uint64_t id);
  // Runs one round; false when there was nothing to do.
  bool step();
  // Runs rounds until every submitted request finished.
  void run_until_idle();
  // Blocks until work arrives or stop() is called (for an engine thread).
  void wait_for_work();
  void stop();
  bool stopped() const { return stopped_; }

  EngineStats stats() const;
  // Engine thread only (or while no round runs).
  Census census() const;
  // Full consistency check of pool, store and lanes (walks everything; for tests and debugging).
  bool audit() const;
  PrefixStats cache_stats() const;
  uint64_t page_bytes() const;
  const EngineOptions& options() const { return opt_; }
  const StatePool& state_pool() const { return state_pool_; }
  int context() const { return opt_.context; }
  Model& model() { return model_; }

 private:
  struct Lane;
  struct Pending {
    std::vector<uint64_t> ids;
    std::vector<GenerationRequest> reqs;
  };
  void admit();
  bool try_admit(const std::vector<Lane*>& lanes, Pending& p);
  void spawn_followers(Lane& leader);
  // One lane's token, drawn by the backend, and the logits row it came from (host memory only
  // when the lane asked for logprobs).
  struct Draw {
    Lane* lane = nullptr;
    const float* row = nullptr;
    int32_t token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top;
  };
  // Adds the draws of lane l (and, with_followers, its waiting siblings) from logit row li to the
  // round; true when the row must come to the host (logprobs).
  bool plan_draws(Lane& l, bool with_followers, int li, RoundInput& in);
  // Logprobs of the round's draws that asked for them, in parallel.
  void logprobs_of_draws();
  void emit(Lane& lane, Draw& d);
  bool step_round();
  void publish();
  void finish(Lane& lane, FinishReason reason, const std::string& error = {});
  void apply_cancels();
  Tensor state_slot(int slot) const { return states_.slice_rows(slot, 1); }
  void snapshot_state(Lane& lane, int mark);

  Model& model_;
  Backend& backend_;
  EngineOptions opt_;
  std::unique_ptr<KvStorage> kv_;
  PagePool pages_;
  std::unique_ptr<PrefixStore> store_;
  int64_t state_floats_ = 0;  // per slot; 0: the model has no recurrent layers
  StatePool state_pool_;
  Tensor states_;             // [slots x state_floats_] backend memory
  // A round's logits, kept across rounds and page-locked by the backend for fast copies.
  std::vector<float> logits_;
  void* logits_pinned_ = nullptr;
  void reserve_logits(size_t n);
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<int32_t> sampled_;      // the round's backend draws, one per RoundInput::samples
  std::vector<int> spec_of_lane_;      // lane index -> its draw in sampled_ this round (-1: none)
  std::vector<Draw> draws_;
  std::unique_ptr<ThreadPool> log_pool_;
  int max_rows_ = 0;
  mutable std::mutex stats_mu_;  // guards the census snapshot other threads read
  EngineStats snapshot_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  int queued_ = 0;    // requests in queue_ (groups count each sibling)
  int reserved_ = 0;  // places promised by try_reserve and not yet submitted
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> rounds_{0}, prompt_tokens_{0}, generated_tokens_{0};
  std::atomic<uint64_t> round_ns_{0}, forward_ns_{0}, emit_ns_{0}, prepare_ns_{0}, forward_wait_ns_{0};
  std::atomic<uint64_t> decode_rounds_{0}, decode_round_ns_{0}, decode_forward_ns_{0}, decode_prepare_ns_{0},
      decode_forward_wait_ns_{0};
  std::atomic<int> busy_{0};
};

}  // namespace tf
