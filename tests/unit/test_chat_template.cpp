// Chat templates: byte-identical to transformers' jinja2 on real model templates, plus the language
// features, syntax errors and the limits a hostile template meets.
#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"

namespace {

using nlohmann::ordered_json;

std::string R(const std::string& tpl, const std::string& ctx = "{}") {
  return tf::ChatTemplate(tpl).render(ordered_json::parse(ctx));
}

std::string first_diff(const std::string& want, const std::string& got) {
  size_t k = 0;
  while (k < want.size() && k < got.size() && want[k] == got[k]) ++k;
  auto around = [&](const std::string& s) { return s.substr(k < 40 ? 0 : k - 40, 80); };
  return tf::cat("first difference at byte ", k, "\n  want: ...", ordered_json(around(want)).dump(),
                 "\n  got:  ...", ordered_json(around(got)).dump());
}

TEST(ChatTemplate, FixturesMatchTransformers) {
  std::filesystem::path dir = TF_SOURCE_DIR "/tests/fixtures/chat_templates";
  int files = 0, cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    std::ifstream in(entry.path());
    ordered_json fx = ordered_json::parse(in);
    tf::ChatTemplate tpl(fx["template"].get<std::string>());
    for (const auto& c : fx["cases"]) {
      ++cases;
      std::string label = entry.path().filename().string() + " " + c["name"].get<std::string>();
      if (c.contains("expected")) {
        std::string want = c["expected"].get<std::string>(), got;
        try {
          got = tpl.render(c["context"]);
        } catch (const std::exception& e) {
          ADD_FAILURE() << label << ": threw " << e.what();
          continue;
        }
        EXPECT_EQ(want, got) << label << ": " << first_diff(want, got);
      } else if (c["raised"].get<bool>()) {
        try {
          tpl.render(c["context"]);
          ADD_FAILURE() << label << ": expected raise_exception";
        } catch (const tf::ChatTemplateRaised& e) {
          EXPECT_EQ(c["error"].get<std::string>(), e.what()) << label;
        }
      } else {
        EXPECT_THROW(tpl.render(c["context"]), tf::Error) << label << " (jinja2: " << c["error"] << ")";
      }
    }
  }
  EXPECT_GE(files, 10);
  EXPECT_GE(cases, 300);
}

TEST(ChatTemplate, Literals) {
  EXPECT_EQ(R("{{ 1 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 0.1 + 0.2 }}"),
            "1|1.5|2.0|1e+20|1.5e-07|0.30000000000000004");
  EXPECT_EQ(R("{{ true }}{{ False }}{{ none }}{{ [1, 'a\\'b', None, (1, 2), (1,)] }}{{ {'a': 1} }}"),
            "TrueFalseNone[1, \"a'b\", None, (1, 2), (1,)]{'a': 1}");
  EXPECT_EQ(R("{{ 'a\\tb\\n\\u00e9\\x41' }}"), "a\tb\n\xc3\xa9" "A");
  EXPECT_EQ(R("{{ 'ab' 'cd' }}{{ \"q\" }}"), "abcdq");
}

TEST(ChatTemplate, Arithmetic) {
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' }}"),
            "3 -4 2 3.5 1024 0.5 abab 1x");
  EXPECT_EQ(R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ [1] + [2] }}"), "7 9 4 [1, 2]");
  EXPECT_THROW(R("{{ 1 / 0 }}"), tf::Error);
  EXPECT_THROW(R("{{ 'a' + 1 }}"), tf::Error);
}

TEST(ChatTemplate, ComparisonsAndLogic) {
  EXPECT_EQ(R("{{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}"),
            "True True True True True");
  EXPECT_EQ(R("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}]"),
            "x y True b []");
  EXPECT_EQ(R("{{ {'a': [1, 2]} == {'a': [1, 2]} }}"), "True");
}

TEST(ChatTemplate, Tests) {
  EXPECT_EQ(R("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}",
              R"({"x": 1})"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 1 is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ true is boolean }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 1 is equalto 1 }}{{ 2 is eq(2) }}{{ x is not none }}{{ range is callable }}", R"({"x": 1})"),
            "TrueTrueTrueTrue");
}

TEST(ChatTemplate, AccessAndSlices) {
  const char* ctx = R"({"d": {"k": "v", "items": 5}, "l": [1, 2, 3, 4], "s": "héllo"})";
  EXPECT_EQ(R("{{ d.k }}{{ d['k'] }}{{ l[-1] }}{{ l[1:3] }}{{ l[::-1] }}{{ l[::2] }}{{ s[1:3] }}{{ s[-1] }}", ctx),
            "vv4[2, 3][4, 3, 2, 1][1, 3]élo");
  EXPECT_EQ(R("{{ d['items'] }}|{{ d.missing }}|{{ l[10] }}|{{ d.missing is defined }}", ctx), "5|||False");
  EXPECT_THROW(R("{{ nothing.attr }}"), tf::Error);
}

TEST(ChatTemplate, Filters) {
  const char* ctx = R"({"xs": [{"n": "b", "v": 2}, {"n": "a", "v": 1}, {"n": "c"}], "s": "  Hi There  "})";
  EXPECT_EQ(R("{{ s|trim }}|{{ s|trim|upper }}|{{ s|lower|trim }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}", ctx),
            "Hi There|HI THERE|hi there|Hello World|Hello");
  EXPECT_EQ(R("{{ xs|length }}{{ 'héllo'|length }}{{ xs|map(attribute='n')|join(',') }}{{ xs|selectattr('v', 'defined')|list|length }}", ctx),
            "35b,a,c2");
  EXPECT_EQ(R("{{ xs|sort(attribute='n')|map(attribute='n')|join }}{{ [3, 1, 2]|sort(reverse=true) }}{{ ['b', 'A', 'a']|unique|list }}", ctx),
            "abc[3, 2, 1]['b', 'A']");
  EXPECT_EQ(R("{{ x|default('d') }}{{ ''|default('e', true) }}{{ [1, 2]|first }}{{ [1, 2]|last }}{{ 'ab'|list }}{{ 3.7|int }}{{ '4'|float }}"),
            "de12['a', 'b']34.0");
  EXPECT_EQ(R("{{ {'b': 1, 'a': [1, 'é']}|tojson }}|{{ {'a': {}}|tojson(indent=2) }}"),
            "{\"b\": 1, \"a\": [1, \"é\"]}|{\n  \"a\": {}\n}");
  EXPECT_EQ(R("{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('odd')|list }}{{ [1, 2, 3]|sum }}{{ [1, 3, 2]|max }}{{ [1, 3, 2]|min }}"),
            "[1, 3][2]631");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|dictsort }}{{ {'a': 1}|items|list }}{{ 'a<b'|e }}{{ 'x y z'|wordcount }}{{ [1, 2, 3]|batch(2)|list }}"),
            "[('a', 2), ('b', 1)][('a', 1)]a&lt;b3[[1, 2], [3]]");
  EXPECT_EQ(R("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 2.5|round }}|{{ -3|abs }}|{{ 'abc'|reverse }}|{{ 'aXb'|replace('X', '-') }}"),
            "a\n  b|  a\n  b|2.0|3|cba|a-b");
  EXPECT_EQ(R("{{ ['a', 'b']|map('upper')|join }}{{ xs|rejectattr('n', 'equalto', 'a')|map(attribute='n')|join }}", ctx), "ABbc");
}

TEST(ChatTemplate, Methods) {
  EXPECT_EQ(R("{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.rsplit(',', 1) }}"),
            "x|a|['a', 'b', 'c']|['a', 'b', 'c']|['a,b', 'c']");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.find('c') }}{{ 'aaa'.count('a') }}{{ '-'.join(['a', 'b']) }}"),
            "TrueTrue23a-b");
  EXPECT_EQ(R("{{ d.get('a') }}{{ d.get('z', 'no') }}{{ d.items()|list }}{{ d.keys()|list }}{{ d.values()|list }}", R"({"d": {"a": 1}})"),
            "1no[('a', 1)]['a'][1]");
  EXPECT_THROW(R("{% set l = [] %}{{ l.append(1) }}"), tf::Error);  // ImmutableSandboxedEnvironment refuses
}

TEST(ChatTemplate, Statements) {
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}"),
            "10TrueFalse33|21FalseFalse32|32FalseTrue31|");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"), "-2,1-3,2-,");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"a": 1, "b": 2}})"), "a=1;b=2;");
  EXPECT_EQ(R("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(R("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "013");
  EXPECT_EQ(R("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(R("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"), "4");
  EXPECT_EQ(R("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(R("{% set x %}in{{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}"), "[in1]UP");
  EXPECT_EQ(R("{% macro f(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, 2) }} {{ f(b=3, a=4) }}"), "1-d 1-2 4-3");
  EXPECT_EQ(R("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(R("a{# comment #}b"), "ab");
  EXPECT_EQ(R("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(R("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ dict(a=1) }}"), "[0, 1, 2][1, 3, 5]{'a': 1}");
}

TEST(ChatTemplate, Whitespace) {
  EXPECT_EQ(R("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");            // trim_blocks
  EXPECT_EQ(R("a\n    {% if true %}b{% endif %}"), "a\nb");                // lstrip_blocks
  EXPECT_EQ(R("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(R("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(R("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(R("x\n"), "x");  // a single trailing newline is dropped, as jinja2 does
  EXPECT_EQ(R("a\r\nb"), "a\nb");
  EXPECT_EQ(R("  {# c #}\nz"), "z");
}

TEST(ChatTemplate, RaiseAndDate) {
  try {
    R("{{ raise_exception('Roles must alternate!') }}");
    FAIL() << "no throw";
  } catch (const tf::ChatTemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate!");
  }
  EXPECT_EQ(R("{{ strftime_now('%d %b %Y') }}", R"({"__now__": 1721988000})"), "26 Jul 2024");
  EXPECT_EQ(R("{{ strftime_now('%Y') }}").size(), 4u);
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  auto msg = [](const std::string& src) {
    try {
      tf::ChatTemplate t(src);
    } catch (const tf::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("ok\n{% if x %}\nfoo").find("line"), std::string::npos);
  EXPECT_NE(msg("a\n  {{ 1 + }}").find("line 2, column 10"), std::string::npos) << msg("a\n  {{ 1 + }}");
  EXPECT_NE(msg("{% frobnicate %}").find("line 1"), std::string::npos);
  EXPECT_NE(msg("{{ 'unterminated }}").find("line 1, column 4"), std::string::npos);
  EXPECT_NE(msg("{% for x in y %}{% endif %}").find("line 1"), std::string::npos);
  EXPECT_NE(msg("{{ (((( }}").find("line 1"), std::string::npos);
  EXPECT_NE(msg("{# open").find("comment"), std::string::npos);
  EXPECT_THROW(tf::ChatTemplate("{{ " + std::string(60000, '(') + " }}"), tf::Error);
  // No statement reaches the file system: include, import and extends are unknown statements.
  EXPECT_NE(msg("{% include '/etc/passwd' %}").find("line 1"), std::string::npos);
  EXPECT_NE(msg("{% import '../../etc/passwd' as x %}").find("line 1"), std::string::npos);
  EXPECT_NE(msg("{% extends 'file:///etc/passwd' %}").find("line 1"), std::string::npos);
}

// Each hostile template must fail with tf::Error well within a second.
void expect_fast_error(const std::string& src) {
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(R(src), tf::Error) << src;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0) << src;
}

TEST(ChatTemplate, LimitsStopHostileTemplates) {
  expect_fast_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  expect_fast_error("{% macro f() %}{{ f() }}{{ f() }}{% endmacro %}{{ f() }}");
  expect_fast_error("{% for i in range(10**9) %}x{% endfor %}");
  expect_fast_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  expect_fast_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}");
  expect_fast_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  expect_fast_error("{{ 'x' * 100000000 }}");
  expect_fast_error("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}");
  expect_fast_error("{% set ns = namespace(l=[1]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}");
  expect_fast_error("{{ 2 ** 100 }}");
}

}  // namespace
