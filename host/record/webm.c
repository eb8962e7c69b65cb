/*
 * webm: VP8 (libvpx) in WebM (libavformat) from BGRX screen frames; see
 * webm.h.
 */
#include "webm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libswscale/swscale.h>
#include <vpx/vp8cx.h>
#include <vpx/vpx_encoder.h>

#define WEBM_IO_BUF 65536

struct webm {
	int fd;
	int width, height;
	uint64_t bytes, frames;
	int64_t last_pts, last_key;
	int write_errno; /* the first failed write's errno */

	vpx_codec_ctx_t codec;
	bool codec_open;
	vpx_image_t *img;
	struct SwsContext *sws;

	AVFormatContext *oc;
	AVStream *st;
	AVPacket *pkt;
	bool header_written;
};

/* ---- the output descriptor as libavformat's I/O --------------------------------- */

static int webm_io_write(void *opaque, uint8_t *buf, int size)
{
	struct webm *w = opaque;
	int done = 0;
	while (done < size) {
		ssize_t n = write(w->fd, buf + done, (size_t)(size - done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (!w->write_errno)
				w->write_errno = n < 0 ? errno : ENOSPC;
			return AVERROR(w->write_errno);
		}
		done += (int)n;
	}
	return size;
}

static int64_t webm_io_seek(void *opaque, int64_t offset, int whence)
{
	struct webm *w = opaque;
	if (whence & AVSEEK_SIZE) {
		off_t cur = lseek(w->fd, 0, SEEK_CUR), end = lseek(w->fd, 0, SEEK_END);
		if (cur < 0 || end < 0 || lseek(w->fd, cur, SEEK_SET) < 0)
			return AVERROR(errno);
		return end;
	}
	off_t r = lseek(w->fd, (off_t)offset, whence & ~AVSEEK_FORCE);
	return r < 0 ? AVERROR(errno) : r;
}

/* ---- errors -------------------------------------------------------------------- */

static int webm_av_fail(struct webm *w, const char *what, int rc, char *why, size_t len)
{
	if (w->write_errno) {
		snprintf(why, len, "%s: cannot write the recording: %s", what,
			 strerror(w->write_errno));
		return -1;
	}
	char msg[AV_ERROR_MAX_STRING_SIZE] = "";
	av_strerror(rc, msg, sizeof msg);
	snprintf(why, len, "%s: %s", what, msg);
	return -1;
}

static void webm_free(struct webm *w)
{
	if (w->codec_open)
		vpx_codec_destroy(&w->codec);
	vpx_img_free(w->img);
	sws_freeContext(w->sws);
	av_packet_free(&w->pkt);
	if (w->oc) {
		if (w->oc->pb) {
			av_freep(&w->oc->pb->buffer);
			avio_context_free(&w->oc->pb);
		}
		avformat_free_context(w->oc);
	}
	free(w);
}

/* ---- open ---------------------------------------------------------------------- */

static int webm_codec_open(struct webm *w, const struct webm_opts *o, char *why, size_t len)
{
	vpx_codec_iface_t *iface = vpx_codec_vp8_cx();
	vpx_codec_enc_cfg_t cfg;
	if (vpx_codec_enc_config_default(iface, &cfg, 0) != VPX_CODEC_OK) {
		snprintf(why, len, "libvpx: no VP8 encoder configuration");
		return -1;
	}
	cfg.g_w = (unsigned)o->width;
	cfg.g_h = (unsigned)o->height;
	cfg.g_timebase.num = 1;
	cfg.g_timebase.den = 1000; /* pts in milliseconds */
	cfg.g_threads = 1;	   /* one core per recording at most */
	cfg.g_lag_in_frames = 0;   /* a frame in, its packet out */
	cfg.g_error_resilient = 0;
	cfg.rc_end_usage = VPX_CQ;
	cfg.rc_target_bitrate = (unsigned)(o->kbps > 0 ? o->kbps : 4000);
	cfg.rc_min_quantizer = 4;
	cfg.rc_max_quantizer = 50;
	cfg.rc_dropframe_thresh = 0; /* never drop: nothing would send it again */
	cfg.rc_resize_allowed = 0;
	cfg.kf_mode = VPX_KF_DISABLED; /* key frames are asked for (webm_frame) */
	if (vpx_codec_enc_init(&w->codec, iface, &cfg, 0) != VPX_CODEC_OK) {
		snprintf(why, len, "libvpx: %s", vpx_codec_error(&w->codec));
		return -1;
	}
	w->codec_open = true;
	int cq = o->cq > 0 ? o->cq : 10;
	if (cq < 4)
		cq = 4;
	if (vpx_codec_control(&w->codec, VP8E_SET_CPUUSED, o->cpu_used > 0 ? o->cpu_used : 10) ||
	    vpx_codec_control(&w->codec, VP8E_SET_CQ_LEVEL, cq) ||
	    vpx_codec_control(&w->codec, VP8E_SET_SCREEN_CONTENT_MODE, 1) ||
	    vpx_codec_control(&w->codec, VP8E_SET_STATIC_THRESHOLD, 1) ||
	    vpx_codec_control(&w->codec, VP8E_SET_NOISE_SENSITIVITY, 0)) {
		snprintf(why, len, "libvpx: %s", vpx_codec_error(&w->codec));
		return -1;
	}
	w->img = vpx_img_alloc(NULL, VPX_IMG_FMT_I420, (unsigned)o->width, (unsigned)o->height, 32);
	w->sws = sws_getContext(o->width, o->height, AV_PIX_FMT_BGR0, o->width, o->height,
				AV_PIX_FMT_YUV420P, SWS_POINT, NULL, NULL, NULL);
	if (!w->img || !w->sws) {
		snprintf(why, len, "out of memory for the %dx%d picture", o->width, o->height);
		return -1;
	}
	return 0;
}

static int webm_mux_open(struct webm *w, char *why, size_t len)
{
	int rc = avformat_alloc_output_context2(&w->oc, NULL, "webm", NULL);
	if (rc < 0 || !w->oc)
		return webm_av_fail(w, "libavformat: the webm muxer", rc, why, len);
	unsigned char *buf = av_malloc(WEBM_IO_BUF);
	AVIOContext *pb =
	    buf ? avio_alloc_context(buf, WEBM_IO_BUF, 1, w, NULL, webm_io_write, webm_io_seek)
		: NULL;
	if (!pb) {
		av_free(buf);
		snprintf(why, len, "out of memory");
		return -1;
	}
	pb->seekable = AVIO_SEEKABLE_NORMAL;
	w->oc->pb = pb;
	w->oc->flags |= AVFMT_FLAG_BITEXACT; /* no encoder string with a version in it */
	w->st = avformat_new_stream(w->oc, NULL);
	w->pkt = av_packet_alloc();
	if (!w->st || !w->pkt) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	w->st->time_base = (AVRational){1, 1000};
	w->st->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
	w->st->codecpar->codec_id = AV_CODEC_ID_VP8;
	w->st->codecpar->width = w->width;
	w->st->codecpar->height = w->height;
	w->st->codecpar->format = AV_PIX_FMT_YUV420P;
	w->st->codecpar->color_range = AVCOL_RANGE_MPEG;
	w->st->codecpar->color_space = AVCOL_SPC_BT470BG; /* libswscale's BT.601 */
	rc = avformat_write_header(w->oc, NULL);
	if (rc < 0)
		return webm_av_fail(w, "libavformat: the header", rc, why, len);
	w->header_written = true;
	return 0;
}

struct webm *webm_open(const struct webm_opts *o, char *why, size_t len)
{
	if (o->width < 1 || o->height < 1 || o->width > 4096 || o->height > 4096) {
		snprintf(why, len, "a %dx%d picture: 1..4096 each way", o->width, o->height);
		return NULL;
	}
	struct webm *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(why, len, "out of memory");
		return NULL;
	}
	w->fd = o->fd;
	w->width = o->width;
	w->height = o->height;
	w->last_pts = -1;
	w->last_key = -1;
	av_log_set_level(AV_LOG_QUIET);
	if (webm_codec_open(w, o, why, len) < 0 || webm_mux_open(w, why, len) < 0) {
		webm_free(w);
		return NULL;
	}
	return w;
}

/* ---- frames -------------------------------------------------------------------- */

/* Hands every packet libvpx has to the muxer. */
static int webm_drain(struct webm *w, char *why, size_t len)
{
	vpx_codec_iter_t it = NULL;
	const vpx_codec_cx_pkt_t *p;
	while ((p = vpx_codec_get_cx_data(&w->codec, &it))) {
		if (p->kind != VPX_CODEC_CX_FRAME_PKT)
			continue;
		av_packet_unref(w->pkt);
		w->pkt->data = p->data.frame.buf;
		w->pkt->size = (int)p->data.frame.sz;
		w->pkt->pts = w->pkt->dts = p->data.frame.pts;
		w->pkt->duration =
		    0; /* a frame lasts until the next (a still screen is one frame held) */
		w->pkt->stream_index = 0;
		if (p->data.frame.flags & VPX_FRAME_IS_KEY)
			w->pkt->flags |= AV_PKT_FLAG_KEY;
		int rc = av_write_frame(w->oc, w->pkt);
		w->pkt->data = NULL;
		w->pkt->size = 0;
		if (rc < 0)
			return webm_av_fail(w, "libavformat: a frame", rc, why, len);
		w->frames++;
	}
	return 0;
}

int webm_frame(struct webm *w, const uint8_t *bgrx, size_t stride, int64_t pts_ms, bool last,
	       char *why, size_t len)
{
	if (pts_ms <= w->last_pts)
		pts_ms = w->last_pts + 1; /* the muxer wants them strictly rising */
	const uint8_t *src[4] = {bgrx, NULL, NULL, NULL};
	const int sstride[4] = {(int)stride, 0, 0, 0};
	uint8_t *dst[4] = {w->img->planes[0], w->img->planes[1], w->img->planes[2], NULL};
	const int dstride[4] = {w->img->stride[0], w->img->stride[1], w->img->stride[2], 0};
	sws_scale(w->sws, src, sstride, 0, w->height, dst, dstride);
	vpx_enc_frame_flags_t flags = 0;
	if (w->last_key < 0 || (!last && pts_ms - w->last_key >= WEBM_KEY_EVERY_MS)) {
		flags |= VPX_EFLAG_FORCE_KF;
		w->last_key = pts_ms;
	}
	if (vpx_codec_encode(&w->codec, w->img, pts_ms, 1, flags, VPX_DL_REALTIME) !=
	    VPX_CODEC_OK) {
		snprintf(why, len, "libvpx: %s", vpx_codec_error(&w->codec));
		return -1;
	}
	w->last_pts = pts_ms;
	if (webm_drain(w, why, len) < 0)
		return -1;
	w->bytes = (uint64_t)avio_tell(w->oc->pb);
	return 0;
}

uint64_t webm_bytes(const struct webm *w)
{
	return w->bytes;
}

uint64_t webm_frames(const struct webm *w)
{
	return w->frames;
}

int webm_close(struct webm *w, char *why, size_t len)
{
	int rc = 0;
	if (w->codec_open && vpx_codec_encode(&w->codec, NULL, -1, 1, 0, VPX_DL_REALTIME) ==
				 VPX_CODEC_OK) /* flush (lag 0: nothing is held) */
		rc = webm_drain(w, why, len);
	if (rc == 0 && w->header_written) {
		int arc = av_write_trailer(w->oc);
		if (arc < 0)
			rc = webm_av_fail(w, "libavformat: the trailer", arc, why, len);
		else
			avio_flush(w->oc->pb);
	}
	if (rc == 0 && w->write_errno)
		rc = webm_av_fail(w, "libavformat", AVERROR(w->write_errno), why, len);
	webm_free(w);
	return rc;
}
