#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine_lane.h"

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return "";
}


namespace {

// Pages taken for an admission go back to the pool unless the admission completes.
class PageGuard {
 public:
  PageGuard(PagePool& pool, std::vector<int32_t>& pages) : pool_(pool), pages_(pages) {}
  ~PageGuard() {
    if (!committed_) pool_.release(pages_);
  }
  void commit() { committed_ = true; }

 private:
  PagePool& pool_;
  std::vector<int32_t>& pages_;
  bool committed_ = false;
};

}  // namespace

int max_round_rows(int lanes, int chunk, int context, int round_tokens) {
  const int64_t c = context > 0 ? std::min(chunk, context) : chunk;
  const int64_t prefill = std::min<int64_t>(std::max<int64_t>(round_tokens, c), c * lanes);
  return static_cast<int>(std::min<int64_t>(lanes + prefill, 1 << 30));
}

int default_round_tokens(bool gpu, int chunk) { return gpu ? std::max(chunk, 4096) : chunk; }

Engine::Engine(Model& model, Backend& backend, const EngineOptions& opt)
    : model_(model),
      backend_(backend),
      opt_(opt),
      pages_(1, 1) {
  TF_CHECK(opt_.lanes >= 1 && opt_.lanes <= 4096, "engine: lanes must be in 1..4096, got ", opt_.lanes);
  TF_CHECK(opt_.page_size >= 1 && opt_.chunk >= 1, "engine: page size and chunk must be positive");
  TF_CHECK(opt_.round_tokens == 0 || opt_.round_tokens >= opt_.chunk, "engine: round tokens ", opt_.round_tokens,
           " are fewer than one chunk of ", opt_.chunk);
  const int64_t model_ctx = model.context_length() > 0 ? model.context_length() : 4096;
  if (opt_.context <= 0) opt_.context = static_cast<int>(std::min<int64_t>(model_ctx, 1 << 30));
  TF_CHECK(opt_.context <= model_ctx, "engine: context ", opt_.context, " exceeds the model's window of ", model_ctx);
  // Cached prefixes end on chunk-grid marks, which must also be page boundaries.
  TF_CHECK(opt_.cache_pages == 0 || opt_.chunk % opt_.page_size == 0, "engine: chunk ", opt_.chunk,
           " is not a multiple of the page size ", opt_.page_size, ", which the prompt cache needs");
  TF_CHECK(opt_.cache_pages >= 0, "engine: negative cache size");
  const int pages_per_lane = (opt_.context + opt_.page_size - 1) / opt_.page_size;
  const int total_pages = pages_per_lane * opt_.lanes + opt_.cache_pages;
  pages_ = PagePool(total_pages, opt_.page_size);
  kv_ = backend_.alloc_kv(std::max(1, model.n_kv_layers()), total_pages, opt_.page_size, model.n_kv_heads(),
                          model.head_dim());
  state_floats_ = model.state_floats();
  if (state_floats_ > 0) {
    // Prefill chunks of recurrent layers run on the grid, and resumed prompts restart on it.
    TF_CHECK(opt_.chunk % opt_.page_size == 0, "engine: chunk ", opt_.chunk, " is not a multiple of the page size ",
             opt_.page_size, ", which recurrent layers need");
    state_pool_ = StatePool(opt_.lanes);
    states_ = backend_.alloc(state_pool_.capacity(), state_floats_);
  }
  uint64_t seed = opt_.seed;
  if (seed == 0) seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  store_ = std::make_unique<PrefixStore>(pages_, opt_.page_size, seed, &backend_, kv_.get());
  store_->set_device_cap(opt_.cache_pages);
  store_->set_host_budget(opt_.host_cache_bytes);
  if (state_floats_ > 0) {
    uint64_t budget = opt_.state_cache_bytes;
    const uint64_t marks = static_cast<uint64_t>(opt_.cache_pages) * opt_.page_size / opt_.chunk;
    if (budget == 0) budget = std::max<uint64_t>(marks, opt_.cache_pages > 0 ? 1 : 0) * state_floats_ * sizeof(float);
    store_->set_state_budget(budget);
  }
  snapshot_.lane_pages = pages_per_lane * opt_.lanes;
  max_rows_ = max_round_rows(opt_.lanes, opt_.chunk, opt_.context, opt_.round_tokens);
  model_.reserve(max_rows_);
  // Used once a round, after the forward: its workers sleep rather than spin beside the backend's.
  log_pool_ = std::make_unique<ThreadPool>(std::clamp(default_thread_count(), 1, 8), 0);
  spec_of_lane_.assign(static_cast<size_t>(opt_.lanes), -1);
  for (int i = 0; i < opt_.lanes; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->index = i;
  }
  publish();
}

Engine::~Engine() {
  backend_.unpin_host(logits_pinned_);
  for (auto& l : lanes_) pages_.release(l->pages);
  store_.reset();
  if (states_.data) backend_.free(states_);
}

void Engine::reserve_logits(size_t n) {
  if (n > logits_.capacity()) logits_.reserve(std::max(n, 2 * logits_.capacity()));
  if (logits_.data() == logits_pinned_) return;
  backend_.unpin_host(logits_pinned_);
  logits_pinned_ = logits_.data();
  backend_.pin_host(logits_pinned_, logits_.capacity() * sizeof(float));
}

uint64_t Engine::submit(GenerationRequest req) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(req));
  return submit_group(std::move(one)).front();
}

bool Engine::try_reserve(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n < 0 || queued_ + reserved_ + n > opt_.max_queue) return false;
  reserved_ += n;
  return true;
}

void Engine::release_reservation(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= std::min(n, reserved_);
}

std::vector<uint64_t> Engine::submit_group(std::vector<GenerationRequest> reqs, bool reserved) {
  const int32_t V = model_.vocab_size();
  TF_CHECK(!reqs.empty(), "an empty request group");
  TF_CHECK(static_cast<int>(reqs.size()) <= opt_.lanes, "a group of ", reqs.size(), " siblings needs more than the ",
           opt_.lanes, " lanes");
  for (const auto& req : reqs) {
    TF_CHECK(!req.prompt.empty(), "the prompt is empty");
    TF_CHECK(req.prompt == reqs.front().prompt && req.cache_salt == reqs.front().cache_salt,
             "siblings of a group share one prompt");
    TF_CHECK(req.max_tokens >= 0, "max_tokens must not be negative");
    const int64_t need = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
    TF_CHECK(need <= opt_.context, "prompt of ", req.prompt.size(), " tokens plus max_tokens ", req.max_tokens,
             " exceeds the context of ", opt_.context, " tokens");
  }
  for (int32_t t : reqs.front().prompt)
    TF_CHECK(t >= 0 && t < V, "prompt token id ", t, " is outside the vocabulary (0..", V - 1, ")");
  std::lock_guard<std::mutex> lock(mu_);
  const int n = static_cast<int>(reqs.size());
  if (reserved) {
    TF_CHECK(reserved_ >= n, "submit: ", n, " requests but only ", reserved_, " places reserved");
    reserved_ -= n;
  } else if (queued_ + reserved_ + n > opt_.max_queue) {
    throw QueueFull(cat("the request queue is full (", opt_.max_queue, " waiting); retry later"));
  }
  Pending p;
  for (auto& r : reqs) {
    p.ids.push_back(next_id_++);
    p.reqs.push_back(std::move(r));
  }
  queued_ += static_cast<int>(p.ids.size());
  std::vector<uint64_t> ids = p.ids;
  queue_.push_back(std::move(p));
  cv_.notify_all();
  return ids;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  cv_.notify_all();
}

void Engine::stop() {
  stopped_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void Engine::wait_for_work() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || queued_ > 0 || !cancels_.empty() || busy_ > 0; });
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = snapshot_;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = queued_;
  }
  s.lanes = opt_.lanes;
  s.page_size = opt_.page_size;
  s.kv_bytes = kv_ ? kv_->bytes() : 0;
  s.scratch_rows = static_cast<uint64_t>(max_rows_);
  s.rounds = rounds_;
  s.round_seconds = static_cast<double>(round_ns_.load()) * 1e-9;
  s.forward_seconds = static_cast<double>(forward_ns_.load()) * 1e-9;
  s.emit_seconds = static_cast<double>(emit_ns_.load()) * 1e-9;
  s.decode_rounds = decode_rounds_;
  s.decode_round_seconds = static_cast<double>(decode_round_ns_.load()) * 1e-9;
  s.decode_forward_seconds = static_cast<double>(decode_forward_ns_.load()) * 1e-9;
  s.prepare_seconds = static_cast<double>(prepare_ns_.load()) * 1e-9;
  s.forward_wait_seconds = static_cast<double>(forward_wait_ns_.load()) * 1e-9;
  s.decode_prepare_seconds = static_cast<double>(decode_prepare_ns_.load()) * 1e-9;
  s.decode_forward_wait_seconds = static_cast<double>(decode_forward_wait_ns_.load()) * 1e-9;
  s.prompt_tokens = prompt_tokens_;
  s.generated_tokens = generated_tokens_;
  s.state_slots = state_pool_.capacity();
  s.state_bytes = static_cast<uint64_t>(state_floats_) * sizeof(float);
  return s;
}

Census Engine::census() const {
  Census c;
  c.total = pages_.total();
  c.free = pages_.free_count();
  c.kept = pages_.kept_count();
  c.used = pages_.used_count();
  return c;
}

bool Engine::audit() const {
  int lane_pages = 0;
  for (const auto& l : lanes_) lane_pages += static_cast<int>(l->pages.size());
  // Every used page is held by a lane (pages shared between lanes count once or more).
  int states = 0;
  for (const auto& l : lanes_) states += l->active && l->state >= 0;
  // Between rounds each active lane holds exactly one state slot.
  const bool states_ok = state_floats_ == 0 || state_pool_.in_use() == states;
  return states_ok && pages_.census_ok() && store_->check() && lane_pages >= pages_.used_count();
}

PrefixStats Engine::cache_stats() const { return store_->stats(); }

uint64_t Engine::page_bytes() const {
  return kv_ ? kv_->bytes() / static_cast<uint64_t>(std::max(1, kv_->pages)) : 0;
}

void Engine::finish(Lane& lane, FinishReason reason, const std::string& error) {
  // Siblings still waiting for this prompt cannot go on without it.
  auto followers = std::move(lane.followers);
  lane.followers.clear();
  for (const auto& [idx, id] : followers) {
    Lane& f = *lanes_[static_cast<size_t>(idx)];
    if (f.active && f.id == id && f.waiting) finish(f, reason == FinishReason::Error ? reason : FinishReason::Cancelled, error);
  }
  TokenEvent ev;
  ev.request = lane.id;
  ev.finish = reason;
  ev.error = error;
  ev.prompt_tokens = static_cast<int>(lane.req.prompt.size());
  ev.completion_tokens = lane.generated;
  ev.cached_tokens = lane.cached;
  auto cb = std::move(lane.req.on_event);
  // Full pages whose keys are all computed become kept prefixes (not after a failed round).
  if (reason != FinishReason::Error)
    store_->insert(lane.req.cache_salt, lane.tokens, lane.pages, lane.computed / opt_.page_size);
  pages_.release(lane.pages);
  store_->trim();
  if (lane.state >= 0) state_pool_.release(lane.state);
  lane.state = -1;
  lane.waiting = false;
  lane.active = false;
  lane.tokens.clear();
  lane.req = GenerationRequest{};
  --busy_;
  if (cb) cb(ev);
}

void Engine::apply_cancels() {
  std::vector<uint64_t> cancels;
  std::vector<std::pair<uint64_t, GenerationRequest>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels.swap(cancels_);
    for (uint64_t id : cancels)
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        auto pos = std::find(it->ids.begin(), it->ids.end(), id);
        if (pos == it->ids.end()) continue;
        const size_t k = static_cast<size_t>(pos - it->ids.begin());
        dropped.emplace_back(id, std::move(it->reqs[k]));
        it->ids.erase(pos);
        it->reqs.erase(it->reqs.begin() + static_cast<std::ptrdiff_t>(k));
        --queued_;
        if (it->ids.empty()) queue_.erase(it);
        break;
      }
  }
  for (auto& [id, req] : dropped) {
    TokenEvent ev;
    ev.request = id;
    ev.finish = FinishReason::Cancelled;
    ev.prompt_tokens = static_cast<int>(req.prompt.size());
    if (req.on_event) req.on_event(ev);
  }
  for (uint64_t id : cancels)
    for (auto& l : lanes_)
      if (l->active && l->id == id) finish(*l, FinishReason::Cancelled);
}

bool Engine::try_admit(const std::vector<Lane*>& lanes, Pending& p) {
  const int ps = opt_.page_size;
  const GenerationRequest& head = p.reqs.front();
  const int n_prompt = static_cast<int>(head.prompt.size());
  auto total_pages = [&](const GenerationRequest& r) {
    return static_cast<int>((static_cast<int64_t>(n_prompt) + r.max_tokens + ps - 1) / ps);
  };
  std::vector<std::vector<int32_t>> pages(p.reqs.size());
  std::vector<std::unique_ptr<PageGuard>> guards;
  for (auto& v : pages) guards.push_back(std::make_unique<PageGuard>(pages_, v));
  // Reuse ends on a chunk-grid mark before the last prompt token, which must be computed; a
  // request that wants every prompt row's logits computes them all.
  const int reuse_tokens = head.all_prompt_rows ? 0 : ((n_prompt - 1) / opt_.chunk) * opt_.chunk;
  StateSnapshot snap;
  if (state_floats_ > 0) pages[0] = store_->match_state(head.cache_salt, head.prompt, reuse_tokens / ps, snap);
  else pages[0] = store_->match(head.cache_salt, head.prompt, reuse_tokens / ps);
  int keep = static_cast<int>(pages[0].size()) * ps / opt_.chunk * opt_.chunk / ps;
  // A recurrent state exists only at its own mark: resume there or not at all.
  if (state_floats_ > 0 && keep != static_cast<int>(pages[0].size())) keep = 0;
  while (static_cast<int>(pages[0].size()) > keep) {
    pages_.unref(pages[0].back());
    pages[0].pop_back();
  }
  // Siblings later share the leader's full prompt pages and take their own for the rest.
  const int shared = n_prompt / ps;
  int fresh = total_pages(head) - keep;
  for (size_t k = 1; k < p.reqs.size(); ++k) fresh += total_pages(p.reqs[k]) - shared;
  if (pages_.free_count() < fresh) store_->evict_until_free(fresh);
  if (pages_.free_count() < fresh) return false;  // waits for pages; the guards give back the match
  pages_.alloc(total_pages(head) - keep, pages[0]);
  for (size_t k = 1; k < p.reqs.size(); ++k) pages_.alloc(total_pages(p.reqs[k]) - shared, pages[k]);
  for (auto& g : guards) g->commit();
  for (size_t k = 0; k < p.reqs.size(); ++k) {
    Lane& l = *lanes[k];
    l.pages = std::move(pages[k]);
    l.active = true;
    l.id = p.ids[k];
    l.req = std::move(p.reqs[k]);
    l.tokens = l.req.prompt;
    l.computed = k == 0 ? keep * ps : 0;
    l.cached = keep * ps;
    l.generated = 0;
    l.waiting = k > 0;
    if (k > 0) lanes[0]->followers.emplace_back(l.index, l.id);
    if (state_floats_ > 0) {
      l.state = state_pool_.alloc();
      // Siblings get the leader's state when its prompt is done; a leader starts fresh or restored.
      if (k == 0 && keep > 0) {
        backend_.from_host(snap->data(), state_slot(l.state));
      } else if (k == 0) {
        backend_.zero(state_slot(l.state));
      }
    }
    ++busy_;
  }
  return true;
}

void Engine::spawn_followers(Lane& leader) {
  const int ps = opt_.page_size;
  const int n_prompt = static_cast<int>(leader.req.prompt.size());
  const int shared = n_prompt / ps;
  for (const auto& [idx, id] : leader.followers) {
    Lane& f = *lanes_[static_cast<size_t>(idx)];
    if (!f.active || f.id != id || !f.waiting) continue;
    std::vector<int32_t> pages(leader.pages.begin(), leader.pages.begin() + shared);
    for (int32_t pg : pages) pages_.ref(pg);
    // The partly filled last prompt page is copied: each sibling writes its own tokens there.
    if (n_prompt % ps) backend_.kv_page_copy(*kv_, leader.pages[static_cast<size_t>(shared)], f.pages.front());
    if (state_floats_ > 0) backend_.copy(state_slot(leader.state), state_slot(f.state));
    pages.insert(pages.end(), f.pages.begin(), f.pages.end());
    f.pages = std::move(pages);
    f.computed = n_prompt;
    f.waiting = false;
  }
}

void Engine::admit() {
  for (;;) {
    std::vector<Lane*> free_lanes;
    for (auto& l : lanes_)
      if (!l->active) free_lanes.push_back(l.get());
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() || free_lanes.size() < queue_.front().ids.size()) return;  // FIFO: the head waits
      p = std::move(queue_.front());
      queue_.pop_front();
      queued_ -= static_cast<int>(p.ids.size());
    }
    free_lanes.resize(p.ids.size());
    if (!try_admit(free_lanes, p)) {
      std::lock_guard<std::mutex> lock(mu_);
      queued_ += static_cast<int>(p.ids.size());
      queue_.push_front(std::move(p));  // FIFO: the head waits for pages
      return;
    }
    for (Lane* l : free_lanes)
      if (l->active && !l->waiting && l->followers.empty() && l->req.max_tokens == 0 && !l->req.on_logits)
        finish(*l, FinishReason::Length);
  }
}

void Engine::publish() {
  const Census c = census();
  const PrefixStats ps = store_->stats();
  std::lock_guard<std::mutex> lock(stats_mu_);
  snapshot_.pages_total = c.total;
  snapshot_.pages_free = c.free;
  snapshot_.pages_kept = c.kept;
  snapshot_.pages_used = c.used;
  snapshot_.lanes_busy = busy_;
  snapshot_.state_slots_used = state_pool_.in_use();
  snapshot_.cache = ps;
}

bool Engine::step() {
  const bool did = step_round();
  publish();
  return did;
}

bool Engine::step_round() {
  const auto t_round = std::chrono::steady_clock::now();
  auto ns_since = [](std::chrono::steady_clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
  };
  apply_cancels();
  admit();
  publish();  // readers see the admitted lanes and their pages before the round runs
  std::vector<LaneStatus> status;
  for (auto& l : lanes_)
    if (l->active && !l->waiting)
      status.push_back({l->index, l->computed, static_cast<int>(l->req.prompt.size()),
                        static_cast<int>(l->tokens.size()), {}});
  if (status.empty()) return false;
  RoundPlan plan = plan_round(status, max_rows_, opt_.chunk);
  if (plan.items.empty()) return false;

  RoundInput in;
  std::vector<int> pending;  // each item's new state slot
  if (state_floats_ > 0) {
    in.states.pool = states_.data;
    in.states.slot_floats = state_floats_;
    in.states.slots = state_pool_.capacity();
  }
  std::vector<int> item_first_row;
  std::vector<std::vector<int>> item_logit_index;
  for (const auto& it : plan.items) {
    Lane& l = *lanes_[static_cast<size_t>(it.lane)];
    const int seq = static_cast<int>(in.layout.seq_pages.size());
    in.layout.seq_pages.push_back(l.pages);
    item_first_row.push_back(in.layout.rows());
    std::vector<int> logit_idx;
    const bool last_chunk = it.end >= static_cast<int>(l.req.prompt.size());
    for (int pos = it.begin; pos < it.end; ++pos) {
      const int row = in.layout.rows();
      in.tokens.push_back(l.tokens[static_cast<size_t>(pos)]);
      in.layout.pos.push_back(pos);
      in.layout.seq.push_back(seq);
      const bool want = it.decode || l.req.on_logits || (last_chunk && pos == it.end - 1);
      if (want) {
        const int li = static_cast<int>(in.logit_rows.size());
        logit_idx.push_back(li);
        in.logit_rows.push_back(row);
        bool full = static_cast<bool>(l.req.on_logits);
        if ((it.decode || last_chunk) && pos == it.end - 1) full = plan_draws(l, !it.decode, li, in) || full;
        in.logit_full.push_back(full ? 1 : 0);
      } else {
        logit_idx.push_back(-1);
      }
    }
    item_logit_index.push_back(std::move(logit_idx));
    if (state_floats_ > 0) {
      pending.push_back(state_pool_.alloc());
      in.states.src.push_back(l.state);
      in.states.dst.push_back(pending.back());
      in.states.step.push_back(it.decode ? 1 : 0);
    }
  }
  reserve_logits(in.logit_rows.size() * static_cast<size_t>(model_.vocab_size()));
  std::vector<float>& logits = logits_;
  uint64_t forward_ns = 0, wait_ns = 0;
  const uint64_t prepare_ns = ns_since(t_round);
  try {
    const auto t_forward = std::chrono::steady_clock::now();
    const double wait0 = backend_.device_wait_seconds();
    model_.forward(in, *kv_, logits, sampled_);
    forward_ns = ns_since(t_forward);
    wait_ns = static_cast<uint64_t>(std::max(0.0, backend_.device_wait_seconds() - wait0) * 1e9);
    forward_ns_ += forward_ns;
    forward_wait_ns_ += wait_ns;
    reserve_logits(logits.size());  // a model that grew the buffer itself gets it pinned again
  } catch (const std::exception& e) {
    log_error("round failed: ", e.what());
    std::fill(spec_of_lane_.begin(), spec_of_lane_.end(), -1);
    for (int slot : pending) state_pool_.release(slot);
    for (const auto& it : plan.items) {
      Lane& l = *lanes_[static_cast<size_t>(it.lane)];
      if (l.active) finish(l, FinishReason::Error, e.what());
    }
    return true;
  }
  ++rounds_;
  prepare_ns_ += prepare_ns;
  for (size_t i = 0; i < pending.size(); ++i) {
    const PlanItem& it = plan.items[i];
    Lane& l = *lanes_[static_cast<size_t>(it.lane)];
    if (!l.active) {
      state_pool_.release(pending[i]);
      continue;
    }
    state_pool_.release(l.state);
    l.state = pending[i];
    // States at grid marks reached by prefill are what a resumed prompt restarts from.
    if (!it.decode && it.end % opt_.chunk == 0 &&
        store_->keeps_states_of(static_cast<uint64_t>(state_floats_) * sizeof(float)))
      snapshot_state(l, it.end);
  }
  const int32_t V = model_.vocab_size();
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const PlanItem& it = plan.items[i];
    Lane& l = *lanes_[static_cast<size_t>(it.lane)];
    if (!l.active) continue;
    const int n_prompt = static_cast<int>(l.req.prompt.size());
    if (!it.decode) prompt_tokens_ += static_cast<uint64_t>(it.end - it.begin);
    l.computed = it.end;
    if (l.req.on_logits) {
      for (int pos = it.begin; pos < it.end; ++pos) {
        int li = item_logit_index[i][static_cast<size_t>(pos - it.begin)];
        l.req.on_logits(pos, logits.data() + static_cast<size_t>(li) * V);
      }
    }
    if (l.computed < n_prompt) continue;
    const int li = item_logit_index[i].back();
    const float* row = logits.data() + static_cast<size_t>(li) * V;
    auto drawn = [&](Lane& d) {
      const int j = spec_of_lane_[static_cast<size_t>(d.index)];
      spec_of_lane_[static_cast<size_t>(d.index)] = -1;
      return j >= 0 ? sampled_[static_cast<size_t>(j)] : -1;
    };
    if (!it.decode && !l.followers.empty()) {
      // Siblings take their first token from the same last prompt row, each with its own draw.
      auto followers = l.followers;
      spawn_followers(l);
      l.followers.clear();
      for (const auto& [idx, id] : followers) {
        Lane& f = *lanes_[static_cast<size_t>(idx)];
        if (f.active && f.id == id) draws_.push_back(Draw{&f, row, drawn(f), 0, {}});
      }
    }
    draws_.push_back(Draw{&l, row, drawn(l), 0, {}});
  }
  std::fill(spec_of_lane_.begin(), spec_of_lane_.end(), -1);
  const auto t_emit = std::chrono::steady_clock::now();
  logprobs_of_draws();
  for (Draw& d : draws_) emit(*d.lane, d);
  draws_.clear();
  emit_ns_ += ns_since(t_emit);
  const uint64_t round_ns = ns_since(t_round);
  round_ns_ += round_ns;
  if (std::all_of(plan.items.begin(), plan.items.end(), [](const PlanItem& it) { return it.decode; })) {
    ++decode_rounds_;
    decode_round_ns_ += round_ns;
    decode_forward_ns_ += forward_ns;
    decode_prepare_ns_ += prepare_ns;
    decode_forward_wait_ns_ += wait_ns;
  }
  return true;
}

void Engine::snapshot_state(Lane& lane, int mark) {
  auto snap = std::make_shared<std::vector<float>>(static_cast<size_t>(state_floats_));
  backend_.to_host(state_slot(lane.state), snap->data());
  const int pages = mark / opt_.page_size;
  store_->insert(lane.req.cache_salt, lane.tokens, lane.pages, pages);
  store_->attach_state(lane.req.cache_salt, lane.tokens, pages, std::move(snap));
}

void Engine::run_until_idle() {
  for (;;) {
    bool did = step();
    std::lock_guard<std::mutex> lock(mu_);
    if (!did && queued_ == 0 && busy_ == 0) return;
  }
}

}  // namespace tf
