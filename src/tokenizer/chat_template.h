#pragma once
// Renders Hugging Face chat templates (tokenizer_config.json "chat_template") the way
// transformers does: jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, tojson(ensure_ascii=False), raise_exception and strftime_now.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja_eval.h"

namespace tf {

// raise_exception(msg) inside a template: what() is exactly msg, so it can go to the client as is.
using ChatTemplateRaised = jinja::TemplateRaised;

class ChatTemplate {
 public:
  // Parses once; syntax errors throw tf::Error naming line and column.
  explicit ChatTemplate(const std::string& source, const jinja::Limits& limits = {});

  // Context keys become template variables (messages, add_generation_prompt, bos_token,
  // eos_token, tools, extra kwargs). strftime_now uses the current local time unless the
  // context holds "__now__": unix seconds, then formatted in UTC, so fixtures are reproducible.
  // nlohmann::json sorts object keys; pass ordered_json to keep the caller's key order (tojson
  // output then matches Python's dict order byte for byte).
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<jinja::Program> program_;
  jinja::Limits limits_;
  std::string render_value(const jinja::Value& context) const;
};

}  // namespace tf
