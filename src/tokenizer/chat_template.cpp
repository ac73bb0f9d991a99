#include "tokenizer/chat_template.h"

#include <ctime>

namespace tf {

ChatTemplate::ChatTemplate(const std::string& source, const jinja::Limits& limits)
    : program_(jinja::parse_template(source)), limits_(limits) {}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render_value(jinja::from_json(context));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_value(jinja::from_json(context));
}

std::string ChatTemplate::render_value(const jinja::Value& context) const {
  TF_CHECK(context.is_dict(), "chat template: render context must be a JSON object");
  std::time_t now = std::time(nullptr);
  bool utc = false;
  if (const jinja::Value* fixed = context.dict->find(std::string("__now__"))) {
    TF_CHECK(fixed->is_int(), "chat template: context field __now__ must be integer unix seconds");
    now = static_cast<std::time_t>(fixed->i);
    utc = true;
  }
  jinja::Evaluator ev(*program_, limits_, now, utc);
  return ev.render(context);
}

}  // namespace tf
