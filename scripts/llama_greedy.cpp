// llama-greedy: load a GGUF, feed it a prompt given as token ids, and decode greedily; the ARM check's tool.
//
// Built for aarch64 by scripts/build_llama_arm.sh against the same llama.cpp source the wheel is built from, and
// run under qemu-aarch64. venus_edge.quantize.arm_check runs the same loop through llama-cpp-python on x86 with
// the same context settings (below), so the two runs differ only in the CPU kernels.
//
// usage: llama-greedy [--no-repack] MODEL PROMPT_IDS N_GEN LOGITS_OUT [N_THREADS]
//   --no-repack keeps the weights in the GGUF's layout (the plain NEON kernels), to tell the repacked kernels'
//               arithmetic apart from the rest of the build's
//   PROMPT_IDS  comma-separated token ids (tokenized by the caller, so both builds see the same prompt)
//   LOGITS_OUT  written as N_GEN rows of n_vocab float32: row i is the distribution that chose token i
// stdout: one JSON object {"tokens": [...], "n_vocab": N, "prompt_ms": F, "decode_ms": F, "system_info": "..."}
// stderr: llama.cpp's log (it names the CPU_REPACK buffer when weights were repacked at load)
#include "llama.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

// These must match GREEDY_CONTEXT in quantize/arm_check.py.
static const int EXTRA_CONTEXT = 8;  // n_ctx = prompt + generated + this

static double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

static int fail(const std::string & message) {
    fprintf(stderr, "llama-greedy: %s\n", message.c_str());
    return 1;
}

int main(int argc, char ** argv) {
    const bool repack = !(argc > 1 && std::string(argv[1]) == "--no-repack");
    if (!repack) {
        --argc;
        ++argv;
    }
    if (argc < 5 || argc > 6) {
        return fail("usage: llama-greedy [--no-repack] MODEL PROMPT_IDS N_GEN LOGITS_OUT [N_THREADS]");
    }
    const std::string model_path = argv[1];
    std::vector<llama_token> prompt;
    {
        std::stringstream ids(argv[2]);
        std::string id;
        while (std::getline(ids, id, ',')) {
            prompt.push_back((llama_token) std::atoi(id.c_str()));
        }
    }
    const int n_gen = std::atoi(argv[3]);
    const int n_threads = argc == 6 ? std::atoi(argv[5]) : 1;
    if (prompt.empty() || n_gen <= 0 || n_threads <= 0) {
        return fail("PROMPT_IDS must be non-empty, N_GEN and N_THREADS positive");
    }
    FILE * logits_out = fopen(argv[4], "wb");
    if (!logits_out) {
        return fail(std::string("cannot write ") + argv[4]);
    }

    llama_backend_init();
    llama_model_params model_params = llama_model_default_params();
    model_params.use_extra_bufts = repack;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), model_params);
    if (!model) {
        return fail("cannot load " + model_path);
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const int n_ctx = (int) prompt.size() + n_gen + EXTRA_CONTEXT;
    llama_context_params params = llama_context_default_params();
    params.n_ctx = n_ctx;
    params.n_batch = n_ctx;
    params.n_ubatch = n_ctx;
    params.n_threads = n_threads;
    params.n_threads_batch = n_threads;
    params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // llama-cpp-python's default
    llama_context * ctx = llama_init_from_model(model, params);
    if (!ctx) {
        return fail("cannot create a context");
    }

    std::vector<llama_token> generated;
    auto start = std::chrono::steady_clock::now();
    double prompt_ms = 0.0;
    llama_batch batch = llama_batch_get_one(prompt.data(), (int32_t) prompt.size());
    for (int step = 0; step < n_gen; ++step) {
        if (llama_decode(ctx, batch) != 0) {
            return fail("llama_decode failed at step " + std::to_string(step));
        }
        if (step == 0) {
            prompt_ms = elapsed_ms(start);
            start = std::chrono::steady_clock::now();
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        fwrite(logits, sizeof(float), n_vocab, logits_out);
        llama_token best = 0;
        for (llama_token token = 1; token < n_vocab; ++token) {
            if (logits[token] > logits[best]) {
                best = token;
            }
        }
        generated.push_back(best);
        batch = llama_batch_get_one(&generated.back(), 1);
    }
    const double decode_ms = elapsed_ms(start);  // n_gen - 1 single-token decodes
    fclose(logits_out);

    printf("{\"tokens\": [");
    for (size_t i = 0; i < generated.size(); ++i) {
        printf(i ? ", %d" : "%d", generated[i]);
    }
    printf("], \"n_vocab\": %d, \"prompt_ms\": %.3f, \"decode_ms\": %.3f, \"system_info\": \"%s\"}\n",
           n_vocab, prompt_ms, decode_ms, llama_print_system_info());

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
