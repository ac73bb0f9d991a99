#pragma once
// Each subcommand lives in its own file and takes the arguments after its name.
namespace tf::cli {

int cmd_run(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace tf::cli
