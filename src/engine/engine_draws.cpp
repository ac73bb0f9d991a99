// The round's draws: planned as backend samples before the forward, finished (logprobs) and
// emitted in lane order after it.
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_lane.h"

namespace tf {

bool Engine::plan_draws(Lane& l, bool with_followers, int li, RoundInput& in) {
  bool full = false;
  // The lane's draw (and its waiting siblings' from the same row) on the backend; logprobs bring
  // the row to the host as well.
  auto plan_draw = [&](Lane& d) {
    full = full || d.req.logprobs >= 0;
    spec_of_lane_[static_cast<size_t>(d.index)] = static_cast<int>(in.samples.size());
    if (d.pen_for != d.id) d.penalties.reset(), d.pen_for = d.id;
    in.samples.push_back(Sampler::spec(d.req.sampling, li, d.tokens.size(), d.tokens, d.req.prompt.size(),
                                       model_.vocab_size(), d.penalties, in.penalties));
  };
  plan_draw(l);
  if (with_followers)
    for (const auto& [idx, id] : l.followers) {
      Lane& f = *lanes_[static_cast<size_t>(idx)];
      if (f.active && f.id == id) plan_draw(f);
    }
  return full;
}

void Engine::logprobs_of_draws() {
  const int32_t V = model_.vocab_size();
  auto one = [&](Draw& d) {
    const Lane& l = *d.lane;
    if (l.req.max_tokens == 0 || l.req.logprobs < 0) return;
    const Sampler::RowNorm norm = Sampler::row_norm(d.row, V);
    d.logprob = Sampler::logprob_of(d.row, norm, d.token);
    if (l.req.logprobs > 0) d.top = Sampler::top_logprobs(d.row, V, norm, l.req.logprobs);
  };
  size_t n = 0;
  for (const Draw& d : draws_) n += d.lane->req.logprobs >= 0 ? 1 : 0;
  if (n < 2) {
    for (Draw& d : draws_) one(d);
    return;
  }
  // Each depends on its own row and lane only, so they run in parallel.
  log_pool_->parallel_for(static_cast<int64_t>(draws_.size()), [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) one(draws_[static_cast<size_t>(i)]);
  });
}

void Engine::emit(Lane& l, Draw& d) {
  const int n_prompt = static_cast<int>(l.req.prompt.size());
  if (l.req.max_tokens == 0) {
    finish(l, FinishReason::Length);
    return;
  }
  const int32_t tok = d.token;
  TokenEvent ev;
  ev.request = l.id;
  ev.token = tok;
  ev.logprob = d.logprob;
  ev.top = std::move(d.top);
  ev.prompt_tokens = n_prompt;
  ev.cached_tokens = l.cached;
  if (std::find(l.req.stop_ids.begin(), l.req.stop_ids.end(), tok) != l.req.stop_ids.end()) {
    finish(l, FinishReason::Stop);
    return;
  }
  l.tokens.push_back(tok);
  ++l.generated;
  ++generated_tokens_;
  ev.completion_tokens = l.generated;
  if (l.req.on_event) l.req.on_event(ev);
  if (l.generated >= l.req.max_tokens || static_cast<int>(l.tokens.size()) >= opt_.context)
    finish(l, FinishReason::Length);
}

}  // namespace tf
