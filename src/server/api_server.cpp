#include "server/api_server.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "base/log.h"
#include "base/memory.h"
#include "base/thread_pool.h"
#include "engine/cache_fit.h"
#include "engine/warm_up.h"
#include "server/api_job.h"
#include "server/api_request.h"
#include "server/sse.h"

namespace tf {

using ojson = nlohmann::ordered_json;

namespace {

void send_json(const std::shared_ptr<HttpResponder>& res, int status, const ojson& j) {
  res->send(status, "application/json", j.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

std::string endpoint_label(const std::string& path) {
  static const char* known[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                                "/memory", "/tokenize", "/detokenize"};
  for (const char* k : known)
    if (path == k) return k;
  return "other";
}

// Host memory the process may use: the CPU's plan limit, and a GPU server's host-side one.
uint64_t host_limit() { return static_cast<uint64_t>(0.7 * static_cast<double>(total_ram_bytes())); }

}  // namespace

ApiServer::ApiServer(ServeOptions opt)
    : opt_(std::move(opt)), http_(opt_.http), queued_bytes_(opt_.max_queue_bytes) {
  TF_CHECK(opt_.max_queue_bytes >= opt_.http.max_body_bytes, "the request queue's ", format_bytes(opt_.max_queue_bytes),
           " cannot hold one largest request body (", format_bytes(opt_.http.max_body_bytes), ")");
  http_.set_handler([this](const HttpRequest& req, std::shared_ptr<HttpResponder> res) { handle(req, std::move(res)); });
}

ApiServer::~ApiServer() {
  if (work_) work_->stop();
  if (engine_) engine_->stop();
  if (engine_thread_.joinable()) engine_thread_.join();
  if (deliver_) deliver_->stop();  // events already drawn still reach their jobs, engine alive
}

uint16_t ApiServer::listen() {
  uint16_t port = http_.listen(opt_.host, opt_.port);
  opt_.port = port;
  http_.stop_on_signals([this] {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_requested_ = true;
    stop_cv_.notify_all();
  });
  http_.start(opt_.http_threads);
  return port;
}

void ApiServer::load() {
  files_ = open_model(opt_.model_path);
  if (opt_.model_name.empty()) {
    std::filesystem::path p(opt_.model_path);
    opt_.model_name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  }
  backend_ = make_backend(opt_.device, opt_.threads > 0 ? opt_.threads : default_thread_count());
  backend_->set_matmul_input(parse_matmul_input(opt_.matmul_input));
  model_ = load_model(files_, *backend_);
  tok_ = load_tokenizer(files_);
  if (const std::string w = vocab_fit_warning(*tok_, model_->vocab_size()); !w.empty()) log_warn(w);
  if (!tok_->chat_template.empty()) template_ = std::make_unique<ChatTemplate>(tok_->chat_template);
  EngineOptions eo;
  eo.lanes = opt_.parallel;
  eo.context = opt_.context;
  eo.max_queue = opt_.max_queue;
  // Prompt-cache marks lie on this grid: finer reuses more of a shared prefix, coarser feeds a
  // GPU's wide matmuls better.
  eo.chunk = opt_.chunk > 0 ? opt_.chunk : (backend_->device_memory_total() > 0 ? 512 : 128);
  eo.round_tokens = opt_.round_tokens > 0 ? opt_.round_tokens
                                          : default_round_tokens(backend_->device_memory_total() > 0, eo.chunk);
  TF_CHECK(eo.round_tokens >= eo.chunk, "--round-tokens ", eo.round_tokens, " is less than one --chunk of ", eo.chunk);
  plan_ = plan(eo);
  log_info(plan_.note);
  eo.cache_pages = plan_.cache_pages;
  eo.host_cache_bytes = static_cast<uint64_t>(opt_.host_cache_gib * static_cast<double>(1ull << 30));
  engine_ = std::make_unique<Engine>(*model_, *backend_, eo);
  engine_thread_ = std::thread([this] { engine_loop(); });
  work_ = std::make_unique<WorkQueue>(std::max(1, opt_.request_threads), static_cast<size_t>(std::max(1, opt_.max_queue)));
  // On a GPU token events go to a delivery thread, so the streams' text runs beside the next
  // round; on the CPU the round's compute wants every core. TF_SERVER_DELIVERY=thread|inline
  // overrides. Unbounded: the engine must never block on it, and a round adds a token a lane.
  const char* delivery = std::getenv("TF_SERVER_DELIVERY");
  const std::string how = delivery ? delivery : "";
  TF_CHECK(how.empty() || how == "thread" || how == "inline", "TF_SERVER_DELIVERY must be thread or inline, got '",
           how, "'");
  if (how == "thread" || (how.empty() && backend_->device_memory_total() > 0))
    deliver_ = std::make_unique<WorkQueue>(1, SIZE_MAX);
  const auto st = engine_->stats();
  const auto mem = process_memory();
  log_info("model ", opt_.model_name, " (", model_->family(), ", ", model_->n_layers(), " layers, vocab ",
           model_->vocab_size(), ") weights ", model_->weight_bytes() >> 20, " MiB");
  log_info("lanes ", eo.lanes, ", context ", engine_->context(), " tokens, KV pool ", st.pages_total, " pages of ",
           st.page_size, " (", st.kv_bytes >> 20, " MiB), process RSS ", mem.rss_bytes >> 20, " MiB, backend ",
           backend_->name(), " (", backend_->threads(), " threads), matmul input ",
           matmul_input_name(backend_->matmul_input()));
  ready_ = true;
  log_info("ready on http://", opt_.host, ":", opt_.port);
}

MemoryPlan ApiServer::plan(EngineOptions& eo) {
  // Touch the mapped weights and size the scratch first, so the footprint counts them.
  volatile uint8_t sink = 0;
  for (const auto& name : files_.weights->names()) {
    const TensorView* t = files_.weights->find(name);
    for (uint64_t i = 0; t && i < t->nbytes; i += 4096) sink = sink + t->data[i];
  }
  const int64_t model_ctx = model_->context_length() > 0 ? model_->context_length() : 4096;
  const int ctx = eo.context > 0 ? eo.context : static_cast<int>(std::min<int64_t>(model_ctx, 1 << 30));
  model_->reserve(max_round_rows(eo.lanes, eo.chunk, ctx, eo.round_tokens));
  MemoryPlanInput in;
  const uint64_t device_total = backend_->device_memory_total();
  // A GPU backend makes some buffers on first use: the widest rounds make them now, so they count.
  if (device_total > 0) warm_up_rounds(*model_, *backend_, eo.lanes, eo.chunk, eo.page_size, ctx, eo.round_tokens);
  // On a GPU the plan covers device memory; on the CPU the process's RAM.
  const uint64_t device_in_use = backend_->device_bytes_in_use();
  const uint64_t device_free = device_total > 0 ? backend_->device_memory_free() : 0;
  const DeviceLimit dl = device_plan_limit(opt_.memory_fraction, device_total, device_in_use, device_free);
  in.limit = device_total > 0 ? dl.bytes : host_limit();
  in.footprint = device_total > 0 ? device_in_use + backend_->round_growth_bound() : process_memory().rss_bytes;
  const uint64_t kv_page_bytes = 2ull * static_cast<uint64_t>(std::max(1, model_->n_kv_layers())) * eo.page_size *
                                 model_->n_kv_heads() * model_->head_dim() * static_cast<uint64_t>(backend_->kv_value_bytes());
  in.page_bytes = kv_page_bytes;
  // Recurrent layers: two state slots per lane, three spare slots, and one kept snapshot per
  // chunk of cached pages (host memory: on the CPU it shares the limit, so a page carries its part).
  const uint64_t state_bytes = static_cast<uint64_t>(model_->state_floats()) * sizeof(float);
  if (state_bytes > 0 && device_total == 0)
    in.page_bytes += (state_bytes * static_cast<uint64_t>(eo.page_size) + static_cast<uint64_t>(eo.chunk) - 1) /
                     static_cast<uint64_t>(eo.chunk);
  in.footprint += 3 * state_bytes;
  // Request bodies being received and waiting for the request threads live in host memory: the CPU's limit.
  if (device_total == 0) in.footprint += opt_.max_queue_bytes + opt_.http.max_body_bytes_in_flight;
  const uint64_t pages_per_lane = (static_cast<uint64_t>(ctx) + eo.page_size - 1) / eo.page_size;
  // A lane's first prompt at the full window touches its KV pages, its sampler's vocabulary
  // buffers, and request state (body, token lists, JSON: about 64 bytes a token) plus a MiB of
  // allocator slack (bench/bench_memory.py measures the sum).
  in.per_lane_bytes = pages_per_lane * in.page_bytes + 4ull * sizeof(float) * static_cast<uint64_t>(model_->vocab_size()) +
                      64ull * static_cast<uint64_t>(ctx) + (1ull << 20) + 2 * state_bytes;
  in.lanes = eo.lanes;
  in.requested_cache_bytes = opt_.prompt_cache_gib < 0 ? -1 : static_cast<int64_t>(opt_.prompt_cache_gib * static_cast<double>(1ull << 30));
  in.over_cap = opt_.prompt_cache_over_cap;
  const uint64_t host_cache = static_cast<uint64_t>(opt_.host_cache_gib * static_cast<double>(1ull << 30));
  // The host tier lives in host memory: the CPU's limit, or apart from a GPU's.
  in.host_cache_bytes = device_total > 0 ? 0 : host_cache;
  const std::string by_free = cat("the limit is what this process uses plus the ", format_bytes(device_free),
                                  " the device had free (less a margin)");
  MemoryPlan p;
  try {
    p = plan_memory(in);
  } catch (const Error& e) {
    if (!dl.by_free) throw;
    fail(e.what(), " (", by_free, ": other programs hold the rest)");
  }
  if (device_total == 0) return p;
  if (dl.by_free) p.note += cat("; ", by_free, ", below --memory-fraction's share");
  if (model_->state_floats() > 0) {
    // On a GPU the kept recurrent states live in host memory: one per cached chunk, within a quarter of RAM.
    const uint64_t marks = static_cast<uint64_t>(p.cache_pages) * static_cast<uint64_t>(eo.page_size) /
                           static_cast<uint64_t>(eo.chunk);
    eo.state_cache_bytes = std::max<uint64_t>(1, std::min<uint64_t>(marks * state_bytes, total_ram_bytes() / 4));
  }
  HostPlanInput h;
  h.limit = host_limit();
  h.footprint = process_memory().anon_bytes;
  h.host_cache_bytes = host_cache;
  h.state_cache_bytes = eo.state_cache_bytes;
  h.request_bytes = opt_.max_queue_bytes + opt_.http.max_body_bytes_in_flight;
  // A lane's request state (body, token lists, JSON: about 64 bytes a token), its vocabulary buffers, a MiB of slack.
  h.per_lane_bytes = 64ull * static_cast<uint64_t>(ctx) + 4ull * sizeof(float) * static_cast<uint64_t>(model_->vocab_size()) +
                     (1ull << 20);
  h.lanes = eo.lanes;
  p.note += "; " + plan_host_memory(h);
  return p;
}

void ApiServer::engine_loop() {
  while (!engine_->stopped()) {
    if (!engine_->step()) engine_->wait_for_work();
  }
}

void ApiServer::run() {
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_requested_; });
  }
  log_info("shutting down: finishing or cancelling streams in flight");
  // Streams get on_close now and their engine requests are cancelled; the engine keeps
  // running until the HTTP side has closed so those cancellations complete.
  http_.shutdown(std::chrono::milliseconds(5000));
  // Requests still queued run now: their clients are gone, so each is refused or cancelled.
  if (work_) work_->stop();
  if (engine_) engine_->stop();
  if (engine_thread_.joinable()) engine_thread_.join();
  if (deliver_) deliver_->stop();
  log_info("stopped");
}

void ApiServer::shutdown() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  stop_requested_ = true;
  stop_cv_.notify_all();
}

void ApiServer::handle(const HttpRequest& req, std::shared_ptr<HttpResponder> res) {
  if (req.method != "POST" || !ready_ || !work_) {
    handle_now(req, res);
    return;
  }
  auto busy = [&](const std::string& why) {
    metrics_.count_request(endpoint_label(req.path), 429);
    res->send(429, "application/json", ApiError(429, cat("the server is busy: ", why, "; retry later"), {}, "rate_limit_exceeded").body());
  };
  // The bodies that wait for a request thread are capped in bytes as well as in number.
  const uint64_t bytes = req.body.size();
  if (!queued_bytes_.take(bytes)) {
    busy(cat("request bodies waiting to be tokenized hold ", format_bytes(queued_bytes_.held()), " of the ",
             format_bytes(queued_bytes_.cap()), " allowed (--max-queue-mib)"));
    return;
  }
  auto copy = std::make_shared<HttpRequest>(req);
  const bool queued = work_->post([this, copy, res, bytes] {
    struct Give {  // on every way out, replies sent or not
      ByteBudget& budget;
      uint64_t bytes;
      ~Give() { budget.give(bytes); }
    } give{queued_bytes_, bytes};
    if (res->cancelled()) {  // the client left, or the server is stopping, while it waited
      metrics_.count_request(endpoint_label(copy->path), 503);
      res->send(503, "application/json", ApiError(503, "the server is shutting down", {}, "server_error").body());
      return;
    }
    try {
      handle_now(*copy, res);
    } catch (const std::exception& e) {
      res->fail_from_handler(e.what());
    }
  });
  if (!queued) {
    queued_bytes_.give(bytes);
    busy(cat(opt_.max_queue, " requests are waiting to be tokenized"));
  }
}

void ApiServer::handle_now(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  try {
    route(req, res);
  } catch (const ApiError& e) {
    metrics_.count_request(endpoint_label(req.path), e.status);
    res->send(e.status, "application/json", e.body());
  }
}

void ApiServer::route(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res) {
  const std::string& path = req.path;
  const bool get = req.method == "GET", post = req.method == "POST";
  if (path == "/health" && get) {
    int status = ready_ ? 200 : 503;
    metrics_.count_request("/health", status);
    send_json(res, status, {{"status", ready_ ? "ok" : "loading"}});
    return;
  }
  if (!ready_) throw ApiError(503, "the model is still loading", {}, "server_error");
  if (!opt_.api_key.empty() && path.rfind("/v1/", 0) == 0) {
    const std::string auth = req.header("Authorization");
    if (auth != "Bearer " + opt_.api_key)
      throw ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key", {},
                     "authentication_error", "invalid_api_key");
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!post) throw ApiError(405, "use POST");
    completions(req, res, path == "/v1/chat/completions");
    return;
  }
  if (path == "/v1/models" && get) {
    metrics_.count_request(path, 200);
    send_json(res, 200,
              {{"object", "list"},
               {"data", ojson::array({{{"id", opt_.model_name}, {"object", "model"}, {"created", 0},
                                       {"owned_by", "tensorfold"}, {"max_model_len", engine_->context()}}})}});
    return;
  }
  if (path == "/metrics" && get) {
    auto st = engine_->stats();
    metrics_.count_request(path, 200);
    res->send(200, "text/plain; version=0.0.4", metrics_.render(st));
    return;
  }
  if (path == "/debug/census" && get) {
    const auto st = engine_->stats();
    const bool ok = st.pages_free + st.pages_kept + st.pages_used == st.pages_total && st.pages_used >= 0;
    metrics_.count_request(path, 200);
    send_json(res, 200, {{"pages_free", st.pages_free}, {"pages_kept", st.pages_kept}, {"pages_used", st.pages_used},
                         {"pages_total", st.pages_total}, {"lanes_busy", st.lanes_busy}, {"queued", st.queued},
                         {"ok", ok}});
    return;
  }
  if (path == "/memory" && get) {
    metrics_.count_request(path, 200);
    res->send(200, "application/json", memory_json());
    return;
  }
  if ((path == "/tokenize" || path == "/detokenize") && post) {
    ojson j = parse_request_json(req.body);
    if (path == "/tokenize") {
      const char* key = j.contains("prompt") ? "prompt" : "text";
      if (!j.contains(key) || !j[key].is_string()) throw ApiError(400, "'prompt' must be a string", "prompt");
      bool add = true;
      if (j.contains("add_special_tokens")) {
        if (!j["add_special_tokens"].is_boolean()) throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
        add = j["add_special_tokens"].get<bool>();
      }
      auto ids = tok_->encode(j[key].get<std::string>(), add);
      metrics_.count_request(path, 200);
      send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_->context()}});
    } else {
      if (!j.contains("tokens") || !j["tokens"].is_array()) throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
      std::vector<int32_t> ids;
      for (const auto& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_->vocab_size())
          throw ApiError(400, cat("token id ", t.dump(), " is outside the vocabulary (0..", model_->vocab_size() - 1, ")"), "tokens");
        ids.push_back(t.get<int32_t>());
      }
      metrics_.count_request(path, 200);
      send_json(res, 200, {{"prompt", tok_->decode(ids, false)}});
    }
    return;
  }
  throw ApiError(404, cat("no route for ", req.method, " ", path), {}, "invalid_request_error", "not_found");
}

std::string ApiServer::memory_json() const {
  const auto mem = process_memory();
  const auto st = engine_->stats();
  const uint64_t page_bytes = engine_->page_bytes();
  ojson j = {
      {"limit_bytes", plan_.limit},
      {"process", {{"rss_bytes", mem.rss_bytes}, {"peak_rss_bytes", mem.peak_rss_bytes}}},
      {"device", {{"backend", backend_->name()},
                  {"matmul_input", matmul_input_name(backend_->matmul_input())},
                  {"bytes_in_use", backend_->device_bytes_in_use()}}},
      {"model", {{"weights_bytes", model_->weight_bytes()}}},
      {"kv_pool", {{"pages_total", st.pages_total}, {"pages_free", st.pages_free}, {"pages_kept", st.pages_kept},
                   {"pages_used", st.pages_used}, {"page_size", st.page_size}, {"page_bytes", page_bytes},
                   {"bytes", st.kv_bytes}, {"lane_pages", st.lane_pages}}},
      {"recurrent_state", {{"slots", st.state_slots}, {"slots_used", st.state_slots_used},
                           {"slot_bytes", st.state_bytes}, {"kept", st.cache.states},
                           {"kept_bytes", st.cache.state_bytes}}},
      {"lanes", {{"count", st.lanes}, {"busy", st.lanes_busy}, {"first_use_bytes", plan_.per_lane_bytes},
                 {"scratch_rows", st.scratch_rows}}},
      {"plan", {{"footprint_bytes", plan_.footprint}, {"lanes_bytes", plan_.lanes_bytes},
                {"budget_bytes", plan_.budget_bytes}, {"cache_bytes", plan_.cache_bytes},
                {"cache_pages", plan_.cache_pages}}},
      {"prompt_cache", {{"entries", st.cache.entries}, {"bytes", st.pages_kept * page_bytes},
                        {"device_pages", st.cache.device_pages}, {"host_entries", st.cache.host_entries},
                        {"host_bytes", st.cache.host_bytes}, {"hits", st.cache.hits}, {"hit_tokens", st.cache.hit_tokens},
                        {"lookups", st.cache.lookups}, {"evictions", st.cache.evictions},
                        {"host_evictions", st.cache.host_evictions}, {"restores", st.cache.restores}}},
      {"census_ok", st.pages_free + st.pages_kept + st.pages_used == st.pages_total && st.pages_used >= 0}};
  return j.dump();
}

void ApiServer::completions(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res, bool chat) {
  const std::string label = chat ? "/v1/chat/completions" : "/v1/completions";
  ApiLimits lim;
  lim.vocab_size = model_->vocab_size();
  lim.context = engine_->context();
  CompletionSpec spec = parse_completion_request(req.body, chat, lim);
  if (!spec.model.empty() && spec.model != opt_.model_name)
    throw ApiError(404, cat("the model '", spec.model, "' does not exist; this server has '", opt_.model_name, "'"),
                   "model", "invalid_request_error", "model_not_found");
  auto job = std::make_shared<ApiJob>(std::move(spec), res, *tok_, metrics_, opt_.model_name);
  CompletionSpec& s = job->spec;
  if (chat) {
    if (!template_) throw ApiError(400, "this model has no chat template; use /v1/completions");
    ojson ctx = s.template_kwargs;
    ctx["messages"] = s.messages;
    ctx["add_generation_prompt"] = s.add_generation_prompt;
    ctx["bos_token"] = tok_->bos_token;
    ctx["eos_token"] = tok_->eos_token;
    std::string text;
    try {
      text = template_->render(ctx);
    } catch (const Error& e) {
      throw ApiError(400, cat("chat template: ", e.what()), "messages");
    }
    job->prompt_ids.push_back(tok_->encode(text, false, true));
  } else {
    for (const auto& p : s.prompts) {
      job->prompt_ids.push_back(p.is_text ? tok_->encode(p.text, true) : p.ids);
      job->echo_texts.push_back(p.is_text ? p.text : tok_->decode(p.ids, true));
    }
  }
  const int ctx_len = engine_->context();
  for (const auto& ids : job->prompt_ids) {
    if (ids.empty()) throw ApiError(400, "the prompt is empty", chat ? "messages" : "prompt");
    const int room = ctx_len - static_cast<int>(ids.size());
    if (room < 1 && !(s.max_tokens == 0 && room == 0))
      throw ApiError(400, cat("the prompt has ", ids.size(), " tokens; the context holds ", ctx_len), chat ? "messages" : "prompt",
                     "invalid_request_error", "context_length_exceeded");
    if (s.max_tokens > room)
      throw ApiError(400, cat("prompt of ", ids.size(), " tokens plus max_tokens ", s.max_tokens, " exceeds the context of ",
                              ctx_len, " tokens"), "max_tokens", "invalid_request_error", "context_length_exceeded");
  }
  if (s.echo && s.stream && !chat && s.logprobs >= 0) throw ApiError(400, "echo with logprobs is not supported when streaming", "echo");
  std::vector<int32_t> stops = s.stop_token_ids;
  if (!s.ignore_eos) {
    for (int32_t e : tok_->eos_ids) stops.push_back(e);
    if (tok_->eos_id >= 0) stops.push_back(tok_->eos_id);
  }
  for (size_t p = 0; p < job->prompt_ids.size(); ++p)
    for (int k = 0; k < s.n; ++k) {
      auto c = std::make_unique<ChoiceState>();
      c->index = static_cast<int>(job->choices.size());
      c->prompt_index = static_cast<int>(p);
      c->decoder = std::make_unique<StreamDecoder>(*tok_, s.skip_special_tokens);
      job->choices.push_back(std::move(c));
    }
  job->arm();
  // Refuse before any stream starts, so a busy server answers 429 with the status line itself.
  const int total = static_cast<int>(job->choices.size());
  if (total > opt_.max_queue)
    throw ApiError(400, cat("the request asks for ", total, " completions; this server queues at most ", opt_.max_queue), "n");
  if (!engine_->try_reserve(total))
    throw ApiError(429, cat("the request queue is full (", opt_.max_queue, " waiting); retry later"), {}, "rate_limit_exceeded");
  int unsubmitted = total;  // reserved places not yet used; given back if anything below fails
  if (s.stream) job->start_stream();
  std::random_device rd;
  auto reply_error = [&](int status, const std::string& msg, const char* type) {
    engine_->release_reservation(unsubmitted);
    job->cancel(*engine_);
    metrics_.count_request(label, status);
    const std::string body = ApiError(status, msg, {}, type).body();
    if (s.stream) {
      res->write(sse_event(body));
      res->end();
    } else {
      res->send(status, "application/json", body);
    }
  };
  Engine* eng = engine_.get();
  std::weak_ptr<ApiJob> weak = job;
  for (size_t p = 0; p < job->prompt_ids.size(); ++p) {
    const auto& ids = job->prompt_ids[p];
    std::vector<ChoiceState*> group;
    std::vector<GenerationRequest> reqs;
    for (auto& cp : job->choices) {
      ChoiceState* c = cp.get();
      if (c->prompt_index != static_cast<int>(p)) continue;
      GenerationRequest g;
      g.prompt = ids;
      g.sampling = s.sampling;
      // Sibling choices draw from streams of their own; a given seed keeps them reproducible.
      g.sampling.seed = s.seed_given ? s.sampling.seed + static_cast<uint64_t>(c->index) : (static_cast<uint64_t>(rd()) << 32 | rd());
      const int room = ctx_len - static_cast<int>(ids.size());
      g.max_tokens = s.max_tokens >= 0 ? s.max_tokens : (chat ? room : std::min(16, room));
      g.stop_ids = stops;
      g.logprobs = s.logprobs;
      g.cache_salt = s.cache_salt;
      // The engine holds each choice's callback until that choice finishes: it keeps the job alive.
      // Events go through the one delivery thread, so a choice's arrive in the engine's order.
      g.on_event = [job, c, eng, dq = deliver_.get()](const TokenEvent& ev) {
        if (!dq || !dq->post([job, c, eng, ev] { job->on_event(*c, ev, *eng); })) job->on_event(*c, ev, *eng);
      };
      if (s.echo && s.logprobs >= 0 && !chat) {
        const int32_t V = model_->vocab_size();
        g.on_logits = [weak, c, V](int pos, const float* lg) {
          if (auto j = weak.lock()) j->on_logits(*c, pos, lg, V);
        };
        g.all_prompt_rows = true;
      }
      group.push_back(c);
      reqs.push_back(std::move(g));
    }
    metrics_.prompt_tokens += ids.size();
    try {
      // n > 1: siblings share one prefill of the prompt when they fit the lanes together.
      std::vector<uint64_t> eids;
      const int n = static_cast<int>(reqs.size());
      if (n <= opt_.parallel) {
        eids = engine_->submit_group(std::move(reqs), /*reserved=*/true);
        unsubmitted -= n;
      } else {
        for (auto& r : reqs) {
          std::vector<GenerationRequest> one;
          one.push_back(std::move(r));
          eids.push_back(engine_->submit_group(std::move(one), /*reserved=*/true).front());
          --unsubmitted;
        }
      }
      for (size_t k = 0; k < group.size(); ++k) group[k]->engine_id = eids[k];
    } catch (const Error& e) {
      // The checks above should have caught it; the request still gets a client error, not a 500.
      reply_error(400, e.what(), "invalid_request_error");
      return;
    }
  }
  metrics_.count_request(label, 200);
  // A client that leaves (or a server shutdown) cancels the job's engine requests.
  res->on_close([weak, eng] {
    if (auto j = weak.lock()) j->cancel(*eng);
  });
}

}  // namespace tf
