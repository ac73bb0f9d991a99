#include "engine/warm_up.h"

#include <algorithm>
#include <vector>

#include "engine/engine.h"

namespace tf {

void warm_up_rounds(Model& model, Backend& backend, int lanes, int chunk, int page_size, int context,
                    int round_tokens) {
  const int32_t vocab = model.vocab_size();
  const int window = static_cast<int>(std::min<int64_t>(model.context_length() > 0 ? model.context_length() : 4096, 1 << 30));
  // The widest round a budget of several chunks makes; one sequence holds at most the model's
  // window less a token to draw and a page of slack, so a wider round takes several prompts.
  const int widest = std::max(1, max_round_rows(lanes, chunk, context, round_tokens) - 1);
  const int one_seq = std::max(1, window - page_size - 1);
  const int seqs = (widest + one_seq - 1) / one_seq;
  const int per = (widest + seqs - 1) / seqs;
  auto prompt = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(i % vocab);
    return t;
  };
  {
    // Prompts of one chunk each that make up the widest rows in one round, on a few pages each.
    EngineOptions o;
    o.lanes = seqs;
    o.page_size = page_size;
    o.chunk = (per + page_size - 1) / page_size * page_size;
    o.context = std::min(o.chunk + page_size, window);
    o.round_tokens = seqs * o.chunk;
    o.seed = 1;
    Engine e(model, backend, o);
    for (int i = 0; i < seqs; ++i) {
      GenerationRequest r;
      r.prompt = prompt(i + 1 < seqs ? per : widest - (seqs - 1) * per);
      r.max_tokens = 1;
      e.submit(std::move(r));
    }
    e.run_until_idle();
  }
  {
    // Every lane at once on two pages each: rounds of `lanes` rows, each drawing a token.
    EngineOptions o;
    o.lanes = lanes;
    o.page_size = page_size;
    o.chunk = page_size;
    o.context = std::min(2 * page_size, window);
    o.seed = 1;
    Engine e(model, backend, o);
    for (int i = 0; i < lanes; ++i) {
      GenerationRequest r;
      r.prompt = prompt(1 + i % std::max(1, std::min(page_size, o.context - 2)));
      r.max_tokens = 2;
      e.submit(std::move(r));
    }
    e.run_until_idle();
  }
}

}  // namespace tf
