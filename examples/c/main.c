/* kinema from C: a Kimodo generation and a MotionBricks plan on one engine, hostile calls
 * that must fail cleanly, and both models run at once from two threads with the results of
 * the single-threaded runs; then text: prompts embedded by an LLM2Vec text encoder, and a
 * Kimodo motion from a prompt equal to the motion from that prompt's embedding (also with
 * constraints); constraints (upstream's constraint JSON) and bad constraint text; then the
 * MotionBricks navigation agent walking a few plans.
 * Usage: kinema_example KIMODO.gguf MOTIONBRICKS.gguf LLM2VEC.gguf CLIPS.npz
 * (examples/c/run.sh builds the library, the tiny models and this program, then runs it). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinema.h"

static char error[512];

#define CHECK(call)                                                              \
    do {                                                                         \
        int32_t status_ = (call);                                                \
        if (status_ != KINEMA_OK) {                                              \
            fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call,  \
                    status_, error);                                             \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#define EXPECT_ERROR(call, code, needle)                                         \
    do {                                                                         \
        int32_t status_ = (call);                                                \
        if (status_ != (code) || strstr(error, (needle)) == NULL) {              \
            fprintf(stderr, "%s:%d: %s -> %d (%s), expected %d with \"%s\"\n",   \
                    __FILE__, __LINE__, #call, status_, error, (code), (needle)); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static int32_t count_steps(void *user, const char *stage, uint64_t step, uint64_t total) {
    (void)total;
    if (strcmp(stage, "sample") == 0) *(uint64_t *)user = step;
    return 0;
}

static int32_t cancel_at_two(void *user, const char *stage, uint64_t step, uint64_t total) {
    (void)user;
    (void)total;
    return strcmp(stage, "sample") == 0 && step == 2;
}

struct job {
    const kimodo_model *kimodo;
    const mb_model *mb;
    const float *embedding;
    size_t embedding_len;
    const kimodo_generate_options *options;
    const mb_command *command;
    kimodo_motion *motion;
    mb_plan_result *plan;
    int32_t status;
    char error[512];
};

static void *run_job(void *arg) {
    struct job *j = arg;
    if (j->kimodo != NULL) {
        j->status = kimodo_generate_embedding(j->kimodo, j->embedding, j->embedding_len,
                                              j->options, &j->motion, j->error,
                                              sizeof j->error);
    } else {
        j->status = mb_plan(j->mb, j->command, NULL, &j->plan, j->error, sizeof j->error);
    }
    return NULL;
}

static kimodo_motion_view motion_view(const kimodo_motion *m) {
    kimodo_motion_view v = {.size = sizeof v, .version = KINEMA_ABI_VERSION};
    CHECK(kimodo_motion_get(m, &v, error, sizeof error));
    return v;
}

static mb_plan_view plan_view(const mb_plan_result *p) {
    mb_plan_view v = {.size = sizeof v, .version = KINEMA_ABI_VERSION};
    CHECK(mb_plan_result_get(p, &v, error, sizeof error));
    return v;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s KIMODO.gguf MOTIONBRICKS.gguf LLM2VEC.gguf CLIPS.npz\n",
                argv[0]);
        return 2;
    }

    kinema_engine_options eo;
    CHECK(kinema_engine_options_init(&eo));
    eo.backend = KINEMA_BACKEND_CPU;
    eo.precision = KINEMA_PRECISION_STRICT;
    eo.threads = 2;
    kinema_engine *engine = NULL;
    CHECK(kinema_engine_create(&eo, &engine, error, sizeof error));

    /* Null options are the defaults (backend and precision auto): an engine on whatever
       this machine has. */
    kinema_engine *defaults = NULL;
    CHECK(kinema_engine_create(NULL, &defaults, error, sizeof error));
    kinema_engine_destroy(defaults);

    /* Hostile calls fail with a message, never a crash. */
    kinema_engine *bad = NULL;
    kinema_engine_options wrong = eo;
    wrong.size = 7;
    EXPECT_ERROR(kinema_engine_create(&wrong, &bad, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "size 7");
    wrong = eo;
    wrong.version = 99;
    EXPECT_ERROR(kinema_engine_create(&wrong, &bad, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "version 99");
    EXPECT_ERROR(kinema_engine_create(&eo, NULL, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "out is null");
    kimodo_model *kimodo = NULL;
    /* A text model that is not one: nothing is loaded. */
    EXPECT_ERROR(kimodo_model_load(engine, argv[1], argv[2], &kimodo, error, sizeof error),
                 KINEMA_ERROR_FORMAT, "not a Llama text model");
    EXPECT_ERROR(kimodo_model_load(engine, "/nonexistent.gguf", NULL, &kimodo, error, sizeof error),
                 KINEMA_ERROR_IO, "/nonexistent.gguf");
    char last[512];
    if (kinema_engine_last_error(engine, last, sizeof last) == 0 || strstr(last, "/nonexistent") == NULL) {
        fprintf(stderr, "the engine's last error is %s\n", last);
        return 1;
    }

    /* Kimodo: a text feature in (an LLM2Vec embedding of the prompt), motion out. */
    CHECK(kimodo_model_load(engine, argv[1], NULL, &kimodo, error, sizeof error));
    size_t dim = kimodo_model_embedding_dim(kimodo);
    float *embedding = malloc(dim * sizeof *embedding);
    for (size_t i = 0; i < dim; i++) embedding[i] = sinf(0.37f * (float)i);
    kimodo_generate_options go;
    CHECK(kimodo_generate_options_init(&go, 12));
    go.steps = 4;
    go.seed = 5;
    uint64_t steps_seen = 0;
    go.progress = count_steps;
    go.progress_user = &steps_seen;
    kimodo_motion *motion = NULL;
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim - 1, &go, &motion, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "needed");
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, SIZE_MAX, &go, &motion, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "needed");
    CHECK(kimodo_generate_embedding(kimodo, embedding, dim, &go, &motion, error, sizeof error));
    kimodo_motion_view mv = motion_view(motion);
    printf("kimodo: %zu frames of %zu joints at %.0f fps after %llu steps; joint 0 of the last frame at "
           "(%.4f, %.4f, %.4f)\n",
           mv.frames, mv.joints, mv.fps, (unsigned long long)steps_seen,
           mv.posed_joints[(mv.frames - 1) * mv.joints * 3], mv.posed_joints[(mv.frames - 1) * mv.joints * 3 + 1],
           mv.posed_joints[(mv.frames - 1) * mv.joints * 3 + 2]);
    if (steps_seen != 4 || mv.frames != 12) return 1;
    go.progress = cancel_at_two;
    kimodo_motion *cancelled = NULL;
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim, &go, &cancelled, error, sizeof error),
                 KINEMA_ERROR_CANCELLED, "cancelled");
    go.progress = NULL;

    /* Constraints: upstream's constraints.json text, here a full-body keyframe at frame 6
     * with its root at x = 0.4, z = 0.3 (30 joints of the tiny SOMA30 model). The constraint
     * row runs (3 rows by default) and the post-processing pins the root there. */
    char constraints[2048];
    int len = snprintf(constraints, sizeof constraints,
                     "[{\"type\": \"fullbody\", \"frame_indices\": [6], \"local_joints_rot\": [[");
    for (int j = 0; j < 30; j++)
        len += snprintf(constraints + len, sizeof constraints - (size_t)len, "%s[0, 0.05, 0]", j ? ", " : "");
    snprintf(constraints + len, sizeof constraints - (size_t)len, "]], \"root_positions\": [[0.4, 0.9, 0.3]]}]");
    go.constraints_json = constraints;
    kimodo_motion *held = NULL;
    CHECK(kimodo_generate_embedding(kimodo, embedding, dim, &go, &held, error, sizeof error));
    kimodo_motion_view hv = motion_view(held);
    const float *root6 = hv.root_positions + 6 * 3;
    printf("kimodo with constraints: root at the keyframe (%.4f, %.4f, %.4f), unconstrained (%.4f, %.4f, "
           "%.4f)\n",
           root6[0], root6[1], root6[2], mv.root_positions[18], mv.root_positions[19], mv.root_positions[20]);
    if (fabsf(root6[0] - 0.4f) > 1e-3f || fabsf(root6[2] - 0.3f) > 1e-3f ||
        memcmp(hv.root_positions, mv.root_positions, hv.frames * 3 * sizeof(float)) == 0) {
        fprintf(stderr, "the constrained root is not at the keyframe\n");
        return 1;
    }
    /* Post-processing off: the raw motion, not pinned exactly. */
    go.postprocess = KIMODO_POSTPROCESS_OFF;
    kimodo_motion *raw = NULL;
    CHECK(kimodo_generate_embedding(kimodo, embedding, dim, &go, &raw, error, sizeof error));
    kimodo_motion_view rv = motion_view(raw);
    if (memcmp(rv.root_positions, hv.root_positions, rv.frames * 3 * sizeof(float)) == 0) return 1;
    kimodo_motion_free(raw);
    kimodo_motion_free(held);
    go.postprocess = 7;
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim, &go, &raw, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "postprocess = 7");
    go.postprocess = KIMODO_POSTPROCESS_DEFAULT;
    go.cfg_rows = 2;
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim, &go, &raw, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "2-row shortcut is exact only without constraints");
    go.cfg_rows = 0;
    /* Bad constraint text: refused with a message naming the problem. */
    go.constraints_json = "[{\"type\": \"fullbody\", \"frame_indices\": [6]";
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim, &go, &raw, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "constraints_json: constraints: not valid JSON");
    go.constraints_json = "[{\"type\": \"root2d\", \"frame_indices\": [12], \"smooth_root_2d\": [[0, 0]]}]";
    EXPECT_ERROR(kimodo_generate_embedding(kimodo, embedding, dim, &go, &raw, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "entry 0 (root2d): frame 12 is outside the motion's 12 frames");
    go.constraints_json = NULL;

    /* MotionBricks: a command (nothing given: the model chooses the length), a plan. */
    mb_model *mb = NULL;
    CHECK(mb_model_load(engine, argv[2], &mb, error, sizeof error));
    mb_command *command = NULL;
    EXPECT_ERROR(mb_command_create(mb, 0, &command, error, sizeof error), KINEMA_ERROR_ARGUMENT, "batch 0");
    CHECK(mb_command_create(mb, 1, &command, error, sizeof error));
    int32_t argmax = -1;
    CHECK(mb_command_get_sampling_argmax(command, &argmax, error, sizeof error));
    if (argmax != 0) return 1; /* Gumbel is the default */
    EXPECT_ERROR(mb_command_set_sampling_argmax(command, 2, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "argmax = 2");
    EXPECT_ERROR(mb_command_set_sampling_argmax(NULL, 1, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "command is null");
    CHECK(mb_command_set_sampling_argmax(command, 1, error, sizeof error));
    CHECK(mb_command_get_sampling_argmax(command, &argmax, error, sizeof error));
    if (argmax != 1) return 1;
    CHECK(mb_command_set_sampling_argmax(command, 0, error, sizeof error));
    CHECK(mb_command_set_seed(command, 7, error, sizeof error));
    float root[8 * 5] = {0};
    uint8_t has_root[8] = {1, 0, 0, 0, 0, 0, 0, 1};
    root[7 * 5 + 0] = 1.5f; /* the last keyframe 1.5 m ahead */
    CHECK(mb_command_set_floats(command, "global_root_values", root, 8 * 5, error, sizeof error));
    CHECK(mb_command_set_flags(command, "has_global_root_values", has_root, 8, error, sizeof error));
    EXPECT_ERROR(mb_command_set_floats(command, "global_root_values", root, 3, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "3 values given");
    EXPECT_ERROR(mb_command_set_floats(command, "no_such_input", root, 1, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "no float input");
    mb_plan_result *plan = NULL;
    CHECK(mb_plan(mb, command, NULL, &plan, error, sizeof error));
    mb_plan_view pv = plan_view(plan);
    printf("motionbricks: %zu plan, %u tokens, %zu frames; qpos of frame 0: root z %.4f, quaternion w %.4f\n",
           pv.batch, pv.num_tokens[0], pv.frames, pv.qpos[2], pv.qpos[3]);

    /* Both models at once from two threads: the same results as above. */
    struct job jobs[2] = {
        {.kimodo = kimodo, .embedding = embedding, .embedding_len = dim, .options = &go},
        {.mb = mb, .command = command},
    };
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (jobs[i].status != KINEMA_OK) {
            fprintf(stderr, "thread %d: %s\n", i, jobs[i].error);
            return 1;
        }
    }
    kimodo_motion_view mv2 = motion_view(jobs[0].motion);
    mb_plan_view pv2 = plan_view(jobs[1].plan);
    size_t n = mv.frames * mv.joints * 3;
    size_t q = pv.batch * pv.frames * 36;
    if (memcmp(mv.posed_joints, mv2.posed_joints, n * sizeof(float)) != 0 ||
        memcmp(mv.features, mv2.features, mv.frames * mv.feature_dim * sizeof(float)) != 0 ||
        memcmp(pv.qpos, pv2.qpos, q * sizeof(float)) != 0 ||
        memcmp(pv.pose_tokens, pv2.pose_tokens, pv.batch * pv.max_tokens * pv.heads * sizeof(uint32_t)) != 0) {
        fprintf(stderr, "the two-thread results differ from the single-threaded ones\n");
        return 1;
    }
    printf("two threads: the same motion and plan, bit for bit\n");

    /* Text: an LLM2Vec encoder, prompts in (UTF-8), embeddings out. */
    kinema_text_options to;
    CHECK(kinema_text_options_init(&to));
    kinema_text_encoder *text = NULL;
    to.chat_template = 7;
    EXPECT_ERROR(kinema_text_encoder_load(engine, argv[3], &to, &text, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "chat_template = 7");
    to.chat_template = KINEMA_CHAT_TEMPLATE_AUTO;
    CHECK(kinema_text_encoder_load(engine, argv[3], &to, &text, error, sizeof error));
    size_t tdim = kinema_text_encoder_dim(text);
    const char *prompts[2] = {"A person walks forward.", "someone waves \xc3\xa9"};
    float *embeddings = malloc(2 * tdim * sizeof *embeddings);
    EXPECT_ERROR(kinema_text_encode(text, prompts, 2, embeddings, tdim, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "needed");
    const char *invalid[1] = {"walks \xff\xfe"};
    EXPECT_ERROR(kinema_text_encode(text, invalid, 1, embeddings, tdim, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "not UTF-8");
    CHECK(kinema_text_encode(text, prompts, 2, embeddings, 2 * tdim, error, sizeof error));
    printf("text: 2 prompts -> 2 x %zu floats; [0][0] = %.6f\n", tdim, embeddings[0]);

    /* Kimodo from a prompt: the motion of that prompt's embedding, bit for bit. */
    kimodo_model *kimodo_text = NULL;
    CHECK(kimodo_model_load(engine, argv[1], argv[3], &kimodo_text, error, sizeof error));
    if (kimodo_model_has_text_encoder(kimodo_text) != 1 || kimodo_model_has_text_encoder(kimodo) != 0)
        return 1;
    EXPECT_ERROR(kimodo_generate(kimodo, prompts[0], &go, &motion, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "no text encoder");
    EXPECT_ERROR(kimodo_generate(kimodo_text, invalid[0], &go, &motion, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "not UTF-8");
    kimodo_motion *from_prompt = NULL, *from_embedding = NULL;
    CHECK(kimodo_generate(kimodo_text, prompts[0], &go, &from_prompt, error, sizeof error));
    CHECK(kimodo_generate_embedding(kimodo_text, embeddings, tdim, &go, &from_embedding, error, sizeof error));
    kimodo_motion_view a = motion_view(from_prompt), b = motion_view(from_embedding);
    if (memcmp(a.posed_joints, b.posed_joints, a.frames * a.joints * 3 * sizeof(float)) != 0) {
        fprintf(stderr, "the motion from the prompt differs from the motion from its embedding\n");
        return 1;
    }
    printf("kimodo from a prompt: the motion of its embedding, bit for bit\n");
    /* With constraints too. */
    go.constraints_json = constraints;
    kimodo_motion *cp = NULL, *ce = NULL;
    CHECK(kimodo_generate(kimodo_text, prompts[0], &go, &cp, error, sizeof error));
    CHECK(kimodo_generate_embedding(kimodo_text, embeddings, tdim, &go, &ce, error, sizeof error));
    kimodo_motion_view pa = motion_view(cp), pb = motion_view(ce);
    if (memcmp(pa.posed_joints, pb.posed_joints, pa.frames * pa.joints * 3 * sizeof(float)) != 0 ||
        fabsf(pa.root_positions[18] - 0.4f) > 1e-3f) {
        fprintf(stderr, "the constrained motion from the prompt is not its embedding's\n");
        return 1;
    }
    kimodo_motion_free(cp);
    kimodo_motion_free(ce);
    go.constraints_json = NULL;
    /* An encoder loaded with other options, given to a model. */
    kimodo_model *kimodo_off = NULL;
    to.chat_template = KINEMA_CHAT_TEMPLATE_OFF;
    kinema_text_encoder *text_off = NULL;
    CHECK(kinema_text_encoder_load(engine, argv[3], &to, &text_off, error, sizeof error));
    CHECK(kimodo_model_load_with_text(engine, argv[1], text_off, &kimodo_off, error, sizeof error));
    kinema_text_encoder_free(text_off); /* the model keeps its own reference */
    kimodo_motion *off = NULL;
    CHECK(kimodo_generate(kimodo_off, prompts[0], &go, &off, error, sizeof error));
    kimodo_motion_free(off);
    kimodo_model_free(kimodo_off);
    kimodo_motion_free(from_prompt);
    kimodo_motion_free(from_embedding);
    kimodo_model_free(kimodo_text);
    kinema_text_encoder_free(text);
    free(embeddings);

    kimodo_motion_free(jobs[0].motion);
    mb_plan_result_free(jobs[1].plan);
    mb_plan_result_free(plan);
    mb_command_free(command);

    /* The navigation agent: stand idle, then walk towards +y; it replans every 16 frames. */
    mb_agent_options ao;
    CHECK(mb_agent_options_init(&ao));
    mb_agent *agent = NULL;
    EXPECT_ERROR(mb_agent_create(mb, "no-such-clips.npz", &ao, &agent, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "no-such-clips.npz");
    CHECK(mb_agent_create(mb, argv[4], &ao, &agent, error, sizeof error));
    mb_agent_command walk;
    CHECK(mb_agent_command_init(&walk));
    walk.style = "run";
    EXPECT_ERROR(mb_agent_push_command(agent, &walk, error, sizeof error), KINEMA_ERROR_ARGUMENT,
                 "is not a style");
    walk.style = "walk";
    walk.movement[0] = 0.0;
    walk.movement[1] = 1.0;
    walk.seed = 3;
    CHECK(mb_agent_push_command(agent, &walk, error, sizeof error));
    float *frames = malloc(64 * 36 * sizeof(float));
    mb_agent_frames fv = {.size = sizeof fv, .version = KINEMA_ABI_VERSION};
    EXPECT_ERROR(mb_agent_step(agent, 64, frames, 63 * 36, &fv, NULL, NULL, error, sizeof error),
                 KINEMA_ERROR_ARGUMENT, "needed");
    CHECK(mb_agent_step(agent, 64, frames, 64 * 36, &fv, NULL, NULL, error, sizeof error));
    for (size_t i = 0; i < fv.frames * 36; i++) {
        if (!isfinite(frames[i])) {
            fprintf(stderr, "agent frame %zu: not finite\n", i / 36);
            return 1;
        }
    }
    printf("agent: %zu frames, %zu plans, last at frame %zu (%u tokens, %.1f ms)\n", fv.frames,
           fv.plans, fv.last_plan_frame, fv.last_plan_tokens, fv.last_plan_ms);
    CHECK(mb_agent_poll(agent, frames, 16 * 36, &fv, error, sizeof error));
    if (fv.first_frame != 64 || fv.plans != 1 || fv.frames != 16) {
        fprintf(stderr, "agent poll: %zu frames from %zu, %zu plans\n", fv.frames,
                fv.first_frame, fv.plans);
        return 1;
    }
    free(frames);
    mb_model_free(mb); /* the agent keeps the model alive */
    mb_agent_free(agent);
    kimodo_motion_free(motion);
    kimodo_model_free(kimodo);
    free(embedding);
    kinema_engine_destroy(engine);
    kinema_engine_destroy(NULL); /* null handles are ignored */
    printf("ok\n");
    return 0;
}
