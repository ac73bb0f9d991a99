#include "server/api_job.h"

#include <algorithm>
#include <random>

#include "server/sse.h"

namespace tf {

using ojson = nlohmann::ordered_json;

namespace {

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

// Longest suffix of s that is a proper prefix of some stop sequence.
size_t held_suffix(const std::string& s, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& st : stops)
    for (size_t k = std::min(st.size() - 1, s.size()); k > best; --k)
      if (s.compare(s.size() - k, k, st, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

std::string json_string(const std::string& s) {
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string chunk_head(const std::string& id, const std::string& object, int64_t created, const std::string& model) {
  std::string h = ojson{{"id", id}, {"object", object}, {"created", created}, {"model", model}}.dump(
      -1, ' ', false, ojson::error_handler_t::replace);
  h.pop_back();  // the object's closing brace: "choices" follows
  h += ",\"choices\":[{\"index\":";
  return h;
}

std::string token_chunk_json(const std::string& head, bool chat, int index, const std::string& delta, int32_t token) {
  std::string out;
  out.reserve(head.size() + delta.size() + 96);
  out += head;
  out += std::to_string(index);
  out += chat ? ",\"delta\":{\"content\":" : ",\"text\":";
  out += json_string(delta);
  if (chat) out += '}';
  out += ",\"logprobs\":null,\"finish_reason\":null";
  if (token >= 0) {
    out += ",\"token_ids\":[";
    out += std::to_string(token);
    out += ']';
  }
  out += "}]}";
  return out;
}

ApiJob::ApiJob(CompletionSpec s, std::shared_ptr<HttpResponder> responder, const Tokenizer& tok, Metrics& metrics,
               std::string model_name)
    : spec(std::move(s)), responder_(std::move(responder)), tok_(tok), metrics_(metrics),
      model_name_(std::move(model_name)) {
  id_ = random_id(spec.chat ? "chatcmpl-" : "cmpl-");
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& st : spec.stop) max_stop_ = std::max(max_stop_, st.size());
  start_ = std::chrono::steady_clock::now();
  chunk_head_ = chunk_head(id_, spec.chat ? "chat.completion.chunk" : "text_completion", created_, model_name_);
}

std::string ApiJob::dump(const ojson& j) const { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson ApiJob::usage() const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (const auto& p : prompt_ids) prompt += static_cast<int64_t>(p.size());
  std::vector<int> prompt_cached(prompt_ids.size(), 0);
  for (const auto& c : choices) {
    completion += static_cast<int64_t>(c->tokens.size());
    auto& pc = prompt_cached[static_cast<size_t>(c->prompt_index)];
    pc = std::max(pc, c->cached);
  }
  for (int c : prompt_cached) cached += c;
  return ojson{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
               {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

void ApiJob::start_stream() {
  responder_->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  if (!spec.chat) {
    if (!spec.echo) return;
    for (auto& c : choices) {
      ojson chunk = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_name_},
                     {"choices", ojson::array({{{"index", c->index}, {"text", echo_texts[static_cast<size_t>(c->prompt_index)]},
                                                {"logprobs", nullptr}, {"finish_reason", nullptr}}})}};
      responder_->write(sse_event(dump(chunk)));
    }
    return;
  }
  for (auto& c : choices) {
    ojson chunk = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_name_},
                   {"choices", ojson::array({{{"index", c->index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                              {"logprobs", nullptr}, {"finish_reason", nullptr}}})}};
    responder_->write(sse_event(dump(chunk)));
    c->role_sent = true;
  }
}

void ApiJob::on_logits(ChoiceState& c, int pos, const float* logits, int32_t vocab) {
  const auto& prompt = prompt_ids[static_cast<size_t>(c.prompt_index)];
  if (pos + 1 >= static_cast<int>(prompt.size())) return;
  // Entry i is the logprob of prompt token i; the first token has none.
  if (c.echo_logprobs.size() < static_cast<size_t>(pos) + 2) c.echo_logprobs.resize(static_cast<size_t>(pos) + 2);
  c.echo_logprobs[static_cast<size_t>(pos) + 1] = Sampler::logprob_of(logits, vocab, prompt[static_cast<size_t>(pos + 1)]);
}

bool ApiJob::append_text(ChoiceState& c, const std::string& piece) {
  std::string full = c.pending + piece;
  c.pending.clear();
  if (!spec.stop.empty()) {
    // The held-back tail is the only place a stop can straddle earlier text.
    size_t first = std::string::npos;
    for (const auto& st : spec.stop) first = std::min(first, full.find(st));
    if (first != std::string::npos) {
      c.text += full.substr(0, first);
      return true;
    }
    size_t hold = held_suffix(full, spec.stop);
    c.pending = full.substr(full.size() - hold);
    full.resize(full.size() - hold);
  }
  c.text += full;
  return false;
}

void ApiJob::on_event(ChoiceState& c, const TokenEvent& ev, Engine& engine) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c.done) return;
  c.cached = std::max(c.cached, ev.cached_tokens);
  if (ev.token >= 0) {
    auto now = std::chrono::steady_clock::now();
    if (!first_token_seen_) {
      first_token_seen_ = true;
      metrics_.ttft.observe(std::chrono::duration<double>(now - start_).count());
    }
    if (!c.tokens.empty()) metrics_.itl.observe(std::chrono::duration<double>(now - c.last_token).count());
    c.last_token = now;
    metrics_.generation_tokens++;
    c.tokens.push_back(ev.token);
    const size_t before = c.text.size();
    const bool stopped = append_text(c, c.decoder->push(ev.token));
    ojson lp;
    if (spec.logprobs >= 0) {
      const std::string piece = tok_.token_bytes(ev.token);
      if (spec.chat) {
        ojson top = ojson::array();
        for (const auto& t : ev.top) {
          std::string b = tok_.token_bytes(t.id);
          top.push_back({{"token", b}, {"logprob", t.logprob}, {"bytes", bytes_of(b)}});
        }
        lp = {{"token", piece}, {"logprob", ev.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
      } else {
        ojson top = ojson::object();
        for (const auto& t : ev.top) top[tok_.token_bytes(t.id)] = t.logprob;
        lp = {{"token", piece}, {"logprob", ev.logprob}, {"top", top}};
      }
      c.logprobs.push_back(lp);
    }
    if (spec.stream && !cancelled_) emit_chunk(c, c.text.substr(before), lp, ev.token);
    if (stopped) {
      engine.cancel(c.engine_id);
      finish_choice(c, "stop");
      if (--remaining_ == 0) complete();
    }
    return;
  }
  // Finish from the engine: flush what the decoder and the stop check held back.
  std::string rest = c.decoder->flush();
  const size_t before = c.text.size();
  c.text += c.pending + rest;
  c.pending.clear();
  if (spec.stream && !cancelled_ && c.text.size() > before) emit_chunk(c, c.text.substr(before), ojson(), -1);
  std::string reason = ev.finish == FinishReason::Length ? "length" : ev.finish == FinishReason::Stop ? "stop" : "abort";
  if (ev.finish == FinishReason::Error) reason = "error";
  finish_choice(c, reason);
  if (--remaining_ == 0) complete();
}

void ApiJob::finish_choice(ChoiceState& c, const std::string& reason) {
  c.done = true;
  c.finish_reason = reason;
  if (!spec.stream || cancelled_) return;
  ojson ch = {{"index", c.index}};
  if (spec.chat) ch["delta"] = ojson::object();
  else ch["text"] = "";
  ch["logprobs"] = nullptr;
  ch["finish_reason"] = reason;
  ojson chunk = {{"id", id_}, {"object", spec.chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", created_}, {"model", model_name_}, {"choices", ojson::array({ch})}};
  responder_->write(sse_event(dump(chunk)));
}

void ApiJob::emit_chunk(ChoiceState& c, const std::string& delta, const ojson& lp, int32_t token) {
  if (delta.empty() && lp.is_null() && !spec.return_token_ids) return;
  if (lp.is_null()) {
    const int32_t id = spec.return_token_ids ? token : -1;
    responder_->write(sse_event(token_chunk_json(chunk_head_, spec.chat, c.index, delta, id)));
    return;
  }
  ojson ch = {{"index", c.index}};
  if (spec.chat) {
    ch["delta"] = {{"content", delta}};
    ch["logprobs"] = {{"content", ojson::array({lp})}};
  } else {
    ch["text"] = delta;
    ch["logprobs"] = {{"tokens", {lp["token"]}}, {"token_logprobs", {lp["logprob"]}},
                      {"top_logprobs", {lp["top"]}}, {"text_offset", {c.text.size() - delta.size()}}};
  }
  ch["finish_reason"] = nullptr;
  if (spec.return_token_ids && token >= 0) ch["token_ids"] = {token};
  ojson chunk = {{"id", id_}, {"object", spec.chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", created_}, {"model", model_name_}, {"choices", ojson::array({ch})}};
  responder_->write(sse_event(dump(chunk)));
}

ojson ApiJob::choice_json(const ChoiceState& c) const {
  ojson ch = {{"index", c.index}};
  const std::string echo = spec.echo && !spec.chat ? echo_texts[static_cast<size_t>(c.prompt_index)] : "";
  if (spec.chat) {
    ch["message"] = {{"role", "assistant"}, {"content", c.text}};
    ch["logprobs"] = spec.logprobs >= 0 ? ojson{{"content", c.logprobs}} : ojson(nullptr);
  } else {
    ch["text"] = echo + c.text;
    if (spec.logprobs >= 0) {
      ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
      size_t off = 0;
      if (spec.echo) {
        const auto& p = prompt_ids[static_cast<size_t>(c.prompt_index)];
        // Siblings that shared one prefill: the leader saw the prompt rows.
        const ChoiceState* src = &c;
        for (const auto& o : choices)
          if (o->prompt_index == c.prompt_index && o->echo_logprobs.size() > src->echo_logprobs.size()) src = o.get();
        for (size_t i = 0; i < p.size(); ++i) {
          std::string b = tok_.token_bytes(p[i]);
          tokens.push_back(b);
          lps.push_back(i < src->echo_logprobs.size() && src->echo_logprobs[i] ? ojson(*src->echo_logprobs[i]) : ojson(nullptr));
          tops.push_back(nullptr);
          offs.push_back(off);
          off += b.size();
        }
        off = echo.size();
      }
      for (const auto& e : c.logprobs) {
        tokens.push_back(e["token"]);
        lps.push_back(e["logprob"]);
        tops.push_back(e["top"]);
        offs.push_back(off);
        off += e["token"].get<std::string>().size();
      }
      ch["logprobs"] = {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
    } else {
      ch["logprobs"] = nullptr;
    }
  }
  ch["finish_reason"] = c.finish_reason;
  if (spec.return_token_ids) ch["token_ids"] = c.tokens;
  return ch;
}

void ApiJob::complete() {
  if (cancelled_) {
    responder_->end();
    return;
  }
  if (spec.stream) {
    if (spec.include_usage) {
      ojson chunk = {{"id", id_}, {"object", spec.chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", created_}, {"model", model_name_}, {"choices", ojson::array()}, {"usage", usage()}};
      responder_->write(sse_event(dump(chunk)));
    }
    responder_->write(sse_done());
    responder_->end();
    return;
  }
  ojson out = {{"id", id_}, {"object", spec.chat ? "chat.completion" : "text_completion"}, {"created", created_},
               {"model", model_name_}};
  ojson arr = ojson::array();
  for (const auto& c : choices) arr.push_back(choice_json(*c));
  out["choices"] = arr;
  out["usage"] = usage();
  if (spec.return_token_ids) {
    if (prompt_ids.size() == 1) out["prompt_token_ids"] = prompt_ids[0];
    else out["prompt_token_ids"] = prompt_ids;
  }
  responder_->send(200, "application/json", dump(out));
}

void ApiJob::cancel(Engine& engine) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  for (auto& c : choices) engine.cancel(c->engine_id);
}

void ApiJob::fail(const ApiError& err) {
  std::lock_guard<std::mutex> lock(mu_);
  responder_->send(err.status, "application/json", err.body());
}

}  // namespace tf
